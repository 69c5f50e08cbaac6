# A derivation source holding exactly the listed files and directories under `root`: a change to
# anything else (docs, CI, other tests) leaves its store path, and so the build, as it was.
#
# It does what `lib.fileset.toSource { root; fileset = lib.fileset.unions [ ... ]; }` does, with
# lib.cleanSourceWith: lib.fileset needs builtins.readFileType (Nix 2.14), and the offline checks
# (tests/nix) run Debian's Nix 2.8. Inside the listed directories, what a working tree gathers
# (Python and tool caches, egg-info) is left out; a listed path that does not exist is an error.
{ lib }:
{
  root,
  include,
  name ? "source",
}:
let
  rootString = toString root;
  missing = lib.filter (p: !builtins.pathExists (root + "/${p}")) include;
  leftover =
    base:
    lib.elem base [
      "__pycache__"
      ".pytest_cache"
      ".mypy_cache"
      ".ruff_cache"
      ".hypothesis"
    ]
    || lib.hasSuffix ".pyc" base
    || lib.hasSuffix ".egg-info" base;
  # A listed path, something under one, or a directory on the way to one.
  wanted =
    path: type:
    let
      rel = lib.removePrefix "${rootString}/" (toString path);
    in
    !(leftover (baseNameOf rel))
    && lib.any (
      p: rel == p || lib.hasPrefix "${p}/" rel || (type == "directory" && lib.hasPrefix "${rel}/" p)
    ) include;
in
if missing != [ ] then
  throw "nix/source.nix: not found under ${rootString}: ${lib.concatStringsSep ", " missing}"
else
  lib.cleanSourceWith {
    src = root;
    inherit name;
    filter = wanted;
  }
