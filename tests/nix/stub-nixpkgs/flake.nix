# A stub nixpkgs for checking flake.nix offline (tests/nix/test_flake.py copies this directory, adds
# nixpkgs' real lib as ./lib, and passes it with --override-input nixpkgs path:...). It has the real
# lib, and packages that are plain derivations built by /bin/sh: it checks the flake's structure and
# what it asks of nixpkgs, not nixpkgs itself.
{
  outputs =
    { self }:
    let
      lib = import ./lib;
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [
        "x86_64-linux"
        "aarch64-linux"
      ] (system: import ./pkgs.nix { inherit lib system; });
    };
}
