# Type stubs for the NixOS test driver (nixpkgs nixos/lib/test-driver), the package the driver's own
# type check imports. Only the surface a test script can reach is declared; see tests/nix/driver_lint.py.
