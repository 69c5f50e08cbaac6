# The Python unit suite as a check, against the built package (its own Python set, with the pinned
# agent-client-protocol). The real-agent end-to-end tests need npm packages and are not run here.
{ pkgs, self, hyperhive }:
let
  python = hyperhive.passthru.python.withPackages (ps: [
    (ps.toPythonModule hyperhive)
    ps.pytest
    ps.pytest-timeout
    ps.hypothesis
  ]);
in
pkgs.runCommand "hyperhive-pytest"
  {
    nativeBuildInputs = [
      python
      pkgs.bash
      pkgs.coreutils
      pkgs.procps
    ];
    src = pkgs.lib.cleanSource ../..;
  }
  ''
    cp -r "$src" source && chmod -R u+w source && cd source
    export HOME="$TMPDIR"
    python -m pytest tests/unit -q -p no:cacheprovider
    touch "$out"
  ''
