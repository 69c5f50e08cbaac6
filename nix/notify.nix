# The operator's notifications (docs/notifications.md): a command run with each event as JSON on its stdin
# when the agent replies, a turn fails or a permission request waits. Option declarations only, for the
# agent at option path `at` (agent-options.nix); agent-service.nix hands them to render.nix, which sets
# HIVE_NOTIFY_COMMAND (a JSON argv) and its bounds when a command is set, and checks them.
{ lib }:
at:
let
  inherit (lib) mkOption types literalExpression;
in
{
  notify = {
    command = mkOption {
      # A script (a store path) is the usual value: it becomes the argv of one element.
      type = types.nullOr (types.coercedTo types.path (p: [ "${p}" ]) (types.nonEmptyListOf types.str));
      default = null;
      example = literalExpression ''
        pkgs.writeShellScript "notify-ntfy" '''
          # NTFY_TOKEN comes from the unit's environmentFile, never from the store.
          event=$(cat)
          title=$(printf '%s' "$event" | ''${lib.getExe pkgs.jq} -r '"\(.agent): \(.event)"')
          message=$(printf '%s' "$event" | ''${lib.getExe pkgs.jq} -r '
            if .event == "reply" then .body
            elif .event == "turn_failed" then "turn \(.turn) failed: \(.error // "no error")"
            else "\(.tool) asks: \(.title)\n\(.allow)\n\(.deny)" end')
          exec ''${lib.getExe pkgs.curl} -fsS --max-time 20 \
            -H "Authorization: Bearer $NTFY_TOKEN" -H "Title: $title" \
            --data-binary "$message" https://ntfy.sh/my-agents
        '''
      '';
      description = ''
        The command run for each notification (`HIVE_NOTIFY_COMMAND`): a program (a store path such as
        a `pkgs.writeShellScript`), or a list, the program and its arguments, run without a shell. It
        reads one JSON object on its standard input, then end of file; `HIVE_NOTIFY_EVENT` names the
        event (`reply`, `turn_failed`, `permission_request`) and `HIVE_NOTIFY_AGENT` the agent (its
        name in a hive, else the host's), so that one ntfy topic, Matrix room or mailbox can serve many
        agents. The schema and what happens on a timeout, a failure or too many at once are in
        docs/notifications.md. The command runs as the service's user with its environment: a secret
        (an ntfy token) goes in {option}`${at}.environmentFile`, never in the script (the store is
        world-readable). The example posts each event to an ntfy topic, formatted with jq.
        null: no notifications.
      '';
    };

    timeout = mkOption {
      type = types.ints.positive;
      default = 30;
      description = ''
        Seconds a notification's command may run (`HIVE_NOTIFY_TIMEOUT`); then it is killed with its
        whole process group, and the failure logged.
      '';
    };

    concurrency = mkOption {
      type = types.ints.positive;
      default = 4;
      description = ''
        How many notifications' commands may run at once (`HIVE_NOTIFY_CONCURRENCY`); the others wait,
        in the order of their events.
      '';
    };

    backlog = mkOption {
      type = types.ints.positive;
      default = 64;
      description = ''
        How many notifications may wait for a free run (`HIVE_NOTIFY_BACKLOG`). Past it the oldest
        waiting one is dropped, and the drops are counted in the log: a command that cannot keep up
        never grows the service's memory nor holds a turn back.
      '';
    };
  };
}
