# The harness, `hyperhive`, from python/ (hatchling). Everything comes from the nixpkgs it is called
# with except agent-client-protocol and nats-py: nixpkgs carries older releases (nats-py's newest
# readable copy is 2.15.0), and the harness is written against the pinned acp 0.12.1 and needs
# nats-py>=2.16 (python/pyproject.toml), so a private Python set overrides them (the overrides stay inside
# this package; the rest of the system keeps nixpkgs' versions).
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
      # The hive across hosts' NATS client (pyproject's `nats` extra; its 2.16 is the first that takes a
      # password callback, which hive/nats.py relies on).
      nats-py = prev.nats-py.overridePythonAttrs (old: rec {
        version = "2.16.0";
        # The PyPI sdist (its sha256 is PyPI's: 1d137ed7…6b72fc). nixpkgs builds the monorepo's nats/
        # from GitHub; the sdist is that directory alone.
        src = fetchPypi {
          pname = "nats_py";
          inherit version;
          hash = "sha256-HRN+16/JtZAzsxmTJMYjffIBalCRk1hxNEp4frprcvw=";
        };
        sourceRoot = "nats_py-${version}";
        # The release pins uv_build below 0.10; nixpkgs' uv-build builds it all the same.
        postPatch = ''
          substituteInPlace pyproject.toml \
            --replace-fail "uv_build>=0.9.28,<0.10.0" "uv_build"
        '';
        # The sdist has no tests (they need a nats-server besides); hyperhive's suite exercises the client.
        doCheck = false;
        meta = old.meta // {
          changelog = "https://github.com/nats-io/nats.py/releases/tag/v${version}";
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
    # Only pyproject's `nats` extra asks for it (the hive across hosts): the package carries it, so the
    # NixOS module's agents and `hyperhive hive-provision` reach a NATS broker.
    nats-py
  ];

  # The tests live at the repository root (tests/), outside this source: the flake's `checks.pytest`
  # runs them against this package.
  doCheck = false;
  pythonImportsCheck = [
    "hyperhive"
    "hyperhive.cli"
    "acp"
    "nats"
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
