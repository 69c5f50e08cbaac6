# The harness, `hyperhive`, from python/ (hatchling). Everything comes from the nixpkgs it is called
# with except agent-client-protocol: nixpkgs carries an older release, and the harness is written
# against the pinned 0.12.1 (python/pyproject.toml), so a private Python set overrides it (the override
# stays inside this package; the rest of the system keeps nixpkgs' version).
{
  lib,
  python3,
  fetchPypi,
}:
let
  pyproject = lib.importTOML ../python/pyproject.toml;

  python = python3.override {
    self = python;
    packageOverrides = final: prev: {
      agent-client-protocol = prev.agent-client-protocol.overridePythonAttrs (old: rec {
        version = "0.12.1";
        # The PyPI sdist; its hash was computed from `pip download agent-client-protocol==0.12.1 --no-deps`.
        src = fetchPypi {
          pname = "agent_client_protocol";
          inherit version;
          hash = "sha256-mWPMtZDtltfcVCycAj6QZ2/HaxxlYuIanuES9PvLAJU=";
        };
        # The release's own suite needs its optional HTTP/websocket extras (httpx, websockets, uvicorn);
        # hyperhive's suite (checks.pytest) exercises what the harness uses.
        doCheck = false;
        # nixpkgs derives the changelog from a GitHub tag, which a PyPI source does not have.
        meta = old.meta // {
          changelog = "https://github.com/agentclientprotocol/python-sdk/releases/tag/${version}";
        };
      });
    };
  };
in
python.pkgs.buildPythonApplication {
  pname = "hyperhive";
  inherit (pyproject.project) version;
  pyproject = true;

  # pyproject.toml and the package's sources only (nix/source.nix): a change elsewhere does not rebuild.
  src = import ./source.nix { inherit lib; } {
    root = ../python;
    include = [
      "pyproject.toml"
      "src"
    ];
    name = "hyperhive-source";
  };

  build-system = [ python.pkgs.hatchling ];

  dependencies = with python.pkgs; [
    mcp
    agent-client-protocol
    anyio
    pydantic
    click
    h11
  ];

  # The tests live at the repository root (tests/), outside this source: the flake's `checks.pytest`
  # runs them against this package.
  doCheck = false;
  pythonImportsCheck = [
    "hyperhive"
    "hyperhive.cli"
    "acp"
  ];

  passthru = {
    # The Python set the package is built with (the dev shell and checks.pytest reuse it).
    inherit python;
  };

  meta = {
    inherit (pyproject.project) description;
    homepage = "https://github.com/hyperhive/hyperhive";
    license = lib.licenses.mit;
    mainProgram = "hyperhive";
    platforms = lib.platforms.linux;
  };
}
