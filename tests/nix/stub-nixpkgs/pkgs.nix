{ lib, system }:
let
  drv =
    name: attrs:
    builtins.derivation {
      inherit name system;
      builder = "/bin/sh";
      args = [
        "-c"
        "echo stub > $out"
      ];
    }
    // attrs;

  pyPkg =
    pname: attrs:
    let
      self = drv "python3-${pname}-${attrs.version}" (
        {
          inherit pname;
          meta = { };
        }
        // attrs
        // {
          overridePythonAttrs = f: pyPkg pname (attrs // f (attrs // { meta = attrs.meta or { }; }));
        }
      );
    in
    self;

  basePython = {
    mcp = pyPkg "mcp" { version = "1.27.1"; };
    agent-client-protocol = pyPkg "agent-client-protocol" {
      version = "0.8.1";
      meta.changelog = throw "the stub's changelog reads src.tag, which a PyPI source does not have";
    };
    anyio = pyPkg "anyio" { version = "4.11.0"; };
    pydantic = pyPkg "pydantic" { version = "2.11.7"; };
    click = pyPkg "click" { version = "8.2.1"; };
    h11 = pyPkg "h11" { version = "0.16.0"; };
    hatchling = pyPkg "hatchling" { version = "1.27.0"; };
    pytest = pyPkg "pytest" { version = "8.4.1"; };
    pytest-timeout = pyPkg "pytest-timeout" { version = "2.4.0"; };
    pytest-xdist = pyPkg "pytest-xdist" { version = "3.8.0"; };
    hypothesis = pyPkg "hypothesis" { version = "6.136.0"; };
    mypy = pyPkg "mypy" { version = "1.17.0"; };
    pyflakes = pyPkg "pyflakes" { version = "3.4.0"; };
    playwright = pyPkg "playwright" { version = "1.52.0"; };
    prometheus-client = pyPkg "prometheus-client" { version = "0.25.0"; };
    nats-py = pyPkg "nats-py" {
      version = "2.15.0";
      meta.changelog = throw "the stub's changelog reads src.tag, which a PyPI source does not have";
    };
  };

  mkPython =
    overrides:
    let
      # The interpreter is a store path, as nixpkgs' is: scripts interpolate it (nix/tests/default.nix).
      stubDerivation = drv "python3" { pname = "python3"; };
      python = {
        inherit stubDerivation;
        interpreter = "${stubDerivation}/bin/python3";
        pkgs =
          let
            final = basePython // overrides final basePython // {
              buildPythonApplication =
                attrs:
                assert attrs.pyproject == true;
                assert attrs.meta ? mainProgram;
                drv "${attrs.pname}-${attrs.version}" (attrs // (attrs.passthru or { }));
              toPythonModule = x: x;
            };
          in
          final;
        override =
          {
            self ? null,
            packageOverrides ? (_: _: { }),
          }:
          mkPython packageOverrides;
        withPackages =
          f:
          drv "python3-env" {
            packageNames = map (p: p.pname) (f python.pkgs);
          };
      };
    in
    python;

  pkgs = {
    inherit lib;
    stdenv.hostPlatform.system = system;
    callPackage =
      fn: args:
      let
        f = if builtins.isFunction fn then fn else import fn;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);
    python3 = mkPython (_: _: { });
    fetchPypi =
      attrs:
      assert attrs ? hash;
      drv "${attrs.pname}-${attrs.version}.tar.gz" { inherit (attrs) pname version hash; };
    testers.runNixOSTest =
      t:
      assert builtins.isString t.name && builtins.isString t.testScript;
      assert t.nodes != { };
      assert builtins.all (n: builtins.isFunction n || builtins.isAttrs n) (builtins.attrValues t.nodes);
      # The test's own arguments are kept: tests/nix/vm-tests.nix evaluates its nodes and script.
      drv "vm-test-run-${t.name}" {
        inherit (t) testScript;
        hyperhiveTest = t;
      };
    # As nixpkgs' runCommandWith: the environment attributes stay on the derivation (nativeBuildInputs,
    # src …) and the script is its buildCommand, passed as a file.
    runCommand =
      name: env: buildCommand:
      drv name (
        env
        // {
          inherit buildCommand;
          passAsFile = [ "buildCommand" ] ++ (env.passAsFile or [ ]);
        }
      );
    writeShellApplication =
      a:
      drv a.name {
        meta.mainProgram = a.name;
        inherit (a) text;
        runtimeInputs = a.runtimeInputs or [ ];
      };
    # A file in the store now (no build): the text's store paths stay as text, without their context,
    # which builtins.toFile refuses (the packages they name are stubs, materialized by the VM emulation).
    writeText = name: text: builtins.toFile name (builtins.unsafeDiscardStringContext text);
    # The shell's environment attributes stay on it, and its packages (test_flake.py reads the Python env's).
    mkShell =
      attrs:
      drv "nix-shell" (
        removeAttrs attrs [ "packages" ]
        // {
          packageNames = map (p: p.name) attrs.packages;
          inherit (attrs) packages;
        }
      );
  }
  // lib.genAttrs [
    "nixfmt-tree"
    "ruff"
    "chromium"
    "nodejs"
    "nix"
    "sqlite"
    "nats-server"
    "curl"
    "bash"
    "coreutils"
    "procps"
    "git"
    "findutils"
    "gnugrep"
    "gnused"
    "systemd"
    "gawk"
    "util-linux"
    "gnutar"
    "gzip"
    "xz"
    "diffutils"
    "gnupatch"
    "which"
    "ripgrep"
    "bzip2"
    "python3Packages"
  ] (n: drv n { });
in
pkgs
