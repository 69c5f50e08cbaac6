# The few packages nix/module.nix and the stand-ins read, as fake derivations (no builds): enough for
# lib.getExe, lib.makeBinPath and string interpolation. writeText is builtins.toFile, which is pure
# and needs no nixpkgs.
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
  bzip2 = fake "bzip2-1.0.8" "bzip2";
  coreutils = fake "coreutils-9.8" "ls";
  curl = fake "curl-8.16.0" "curl";
  diffutils = fake "diffutils-3.12" "diff";
  findutils = fake "findutils-4.10.0" "find";
  gawk = fake "gawk-5.3.2" "awk";
  git = fake "git-2.51.0" "git";
  gnugrep = fake "gnugrep-3.12" "grep";
  gnupatch = fake "patch-2.8" "patch";
  gnused = fake "gnused-4.9" "sed";
  gnutar = fake "gnutar-1.35" "tar";
  gzip = fake "gzip-1.14" "gzip";
  jq = fake "jq-1.8.1" "jq";
  nats-server = fake "nats-server-2.11.0" "nats-server";
  nodejs = fake "nodejs-22.0.0" "node";
  procps = fake "procps-4.0.4" "ps";
  systemd = fake "systemd-258" "systemctl";
  util-linux = fake "util-linux-2.41" "setsid";
  which = fake "which-2.23" "which";
  xz = fake "xz-5.8.1" "xz";
  writeText = name: text: builtins.toFile name text;
  # As nixpkgs' (trivial-builders), a shebang (sh here, bash there) and the text, in a file of the store.
  writeShellScript = name: text: builtins.toFile name "#!/bin/sh\n${text}";
}
