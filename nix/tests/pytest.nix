# The Python suite's fast tier (tests/unit, in-process) as a check, against the built package (its own
# Python set, with the pinned agent-client-protocol). The tiers that start real processes (tests/process,
# tests/faults) and the real-agent end-to-end tests (npm packages) run in .ci/run, not here.
{ pkgs, self, hyperhive }:
let
  python = hyperhive.passthru.python.withPackages (ps: [
    (ps.toPythonModule hyperhive)
    ps.pytest
    ps.pytest-timeout
    ps.hypothesis
    # tests/unit/test_metrics.py parses the metrics endpoint's text with its parser (the `dev` extra's).
    ps.prometheus-client
  ]);
in
pkgs.runCommand "hyperhive-pytest"
  {
    # What the fast tier runs besides Python: bash and coreutils (the tasks some tests hand the engine).
    # A plain list: an emulation of this check reads it by evaluating this file.
    nativeBuildInputs = [
      python
      pkgs.bash
      pkgs.coreutils
    ];
    # What the suite reads (nix/source.nix): the package's project and sources, the tests, pytest's
    # configuration, and the task starter tests/nix names; a docs or CI change does not rerun it.
    src = import ../source.nix { inherit (pkgs) lib; } {
      root = ../..;
      include = [
        "python/pyproject.toml"
        "python/src"
        "tests"
        "nix/tests/start_task.py"
        "pytest.ini"
      ];
      name = "hyperhive-pytest-source";
    };
  }
  ''
    cp -r "$src" source && chmod -R u+w source && cd source
    export HOME="$TMPDIR"
    # stdenv points SSL_CERT_FILE at a file that does not exist, and httpx reads it whenever a client is
    # made, even one for http://127.0.0.1 (the demo agent's, the HTTP tools tests'). nixpkgs' httpx
    # unsets it in a setup hook, which a python.withPackages environment does not carry (buildEnv
    # leaves nix-support out).
    unset SSL_CERT_FILE
    python -m pytest tests/unit -q -p no:cacheprovider
    touch "$out"
  ''
