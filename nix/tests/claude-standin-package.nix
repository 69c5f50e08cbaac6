# A SCRIPTED STAND-IN for the `claude` CLI: the real CLI is unfree and needs a model provider, so this
# prints a recorded stream-json turn (tests/fixtures/captures/claude-stream-sample.jsonl). It keeps what
# the harness handed it in its HOME (the state directory): its arguments, and a copy of the
# `--mcp-config` file, which the harness removes after the turn.
{ pkgs }:
pkgs.writeShellApplication {
  name = "claude";
  text = ''
    printf '%s\n' "$*" >> "$HOME/claude-standin-args"
    previous=""
    for arg in "$@"; do
      if [ "$previous" = --mcp-config ]; then
        cp "$arg" "$HOME/claude-standin-mcp-config.json"
      fi
      previous="$arg"
    done
    cat ${../../tests/fixtures/captures/claude-stream-sample.jsonl}
  '';
}
