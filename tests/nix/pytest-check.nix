# checks.pytest (nix/tests/pytest.nix) called as nix/tests/default.nix calls it, with the stub nixpkgs:
# what tests/nix/build_sandbox.py needs to run its build the way Nix would. Evaluate it from a copy of
# the tracked files (a flake's source), since `src` is copied into the store as Nix copies it.
{
  lib,
  system ? "x86_64-linux",
}:
let
  pkgs = import ./stub-nixpkgs/pkgs.nix { inherit lib system; };
  hyperhive = pkgs.callPackage ../../nix/package.nix { };
  check = import ../../nix/tests/pytest.nix {
    inherit pkgs hyperhive;
    self = null;
  };
in
{
  inherit (check) name buildCommand;
  out = check.outPath;
  # Interpolation copies lib.cleanSource's result into the store: the path the builder gets as $src.
  src = "${check.src}";
  # What the package's build has on its Python path, for the emulated pythonRuntimeDepsCheck.
  packageDependencies = map (d: d.pname) hyperhive.dependencies;
  packageBuildSystem = map (d: d.pname) hyperhive.build-system;
  nativeBuildInputs = map (p: {
    inherit (p) name;
    path = p.outPath;
    # A python.withPackages environment names its packages.
    pythonPackages = p.packageNames or null;
  }) check.nativeBuildInputs;
}
