# The few packages nix/module.nix reads, as fake derivations (no builds): enough for lib.getExe and
# string interpolation. writeText is builtins.toFile, which is pure and needs no nixpkgs.
let
  fake = name: mainProgram: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
    meta = { inherit mainProgram; };
  };
in
{
  hyperhive = fake "hyperhive-0.1.0" "hyperhive";
  claude-code = fake "claude-code-2.0.0" "claude";
  bash = fake "bash-5.3" "bash";
  git = fake "git-2.51.0" "git";
  nodejs = fake "nodejs-22.0.0" "node";
  writeText = name: text: builtins.toFile name text;
}
