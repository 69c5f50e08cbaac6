# The options of one agent, declared once for the one-agent shorthand (`services.hyperhive.agent`,
# module.nix) and for each agent of the hive (`services.hyperhive.agents.<name>`, hive.nix), so that the
# two cannot drift apart. How an agent runs (runtime, claude, acp) comes from runtime-options.nix, shared
# with the sub-agent profiles (subagents.nix); the web view's options from web.nix, the metrics
# endpoint's from metrics.nix.
#
# `at` is the option path the declarations sit under (for descriptions that point at their siblings),
# `cfg` the agent's own configuration (defaults read it lazily), `nixosConfig` the system's, `stateDir`
# the agent's state directory; `named` is true for an agent of the hive.
{ lib, pkgs }:
{
  at,
  cfg,
  nixosConfig,
  stateDir,
  named ? false,
}:
let
  inherit (lib)
    mkOption
    types
    literalExpression
    literalMD
    ;

  workdir = toString cfg.workingDirectory;
  underStateDir = p: p == stateDir || lib.hasPrefix "${stateDir}/" p;
  underHome = p: lib.any (h: p == h || lib.hasPrefix "${h}/" p) [
    "/home"
    "/root"
    "/run/user"
  ];
  staticUser = cfg.user != null && cfg.group != null;
  # A person's account the host declares (isNormalUser) is used as it is: the module declares nothing
  # of it. Read lazily: only the user's isNormalUser, which the module never defines, so there is no
  # cycle through users.users.
  normalUser = cfg.user != null && nixosConfig.users.users.${cfg.user}.isNormalUser;

  # The default `path`, by attribute of pkgs (also written into the option's defaultText).
  toolbox = [
    "bash"
    "coreutils"
    "findutils"
    "gnugrep"
    "gnused"
    "gawk"
    "procps"
    "util-linux"
    "which"
    "git"
    "gnutar"
    "gzip"
    "bzip2"
    "xz"
    "diffutils"
    "gnupatch"
  ];

  # Absolute paths that must stay out of the world-readable store (secrets, mutable directories).
  externalPath = types.pathWith {
    inStore = false;
    absolute = true;
  };
  shared = import ./runtime-options.nix { inherit lib; };
  inherit (shared) seconds;
  runtimeOptions = shared.optionsOf {
    agent = at;
    inherit at;
  };

  mcpServerType = types.submodule (
    { name, ... }:
    {
      options = {
        type = mkOption {
          type = types.enum [
            "stdio"
            "http"
          ];
          default = "stdio";
          description = ''
            How the agent reaches the server: `stdio` starts `command` as a child of the agent,
            `http` connects to `url` (streamable HTTP).
          '';
        };
        command = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = literalExpression ''"''${pkgs.mcp-server-filesystem}/bin/mcp-server-filesystem"'';
          description = "The executable of a `stdio` server. Required for `stdio`, unset for `http`.";
        };
        args = mkOption {
          type = types.listOf types.str;
          default = [ ];
          description = "Arguments of a `stdio` server's command.";
        };
        env = mkOption {
          type = types.attrsOf types.str;
          default = { };
          description = ''
            Environment of a `stdio` server. The file holding it is in the Nix store (world-readable):
            write a secret as a `''${VAR}` reference to a variable of
            {option}`${at}.environmentFile`, which the harness expands at start.
          '';
        };
        url = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "http://127.0.0.1:8931/mcp";
          description = "The endpoint of an `http` server. Required for `http`, unset for `stdio`.";
        };
        headers = mkOption {
          type = types.attrsOf types.str;
          default = { };
          example = {
            Authorization = "Bearer \${GITHUB_TOKEN}";
          };
          description = ''
            HTTP headers sent to an `http` server. Never put a secret here literally (it would land in
            the Nix store): write `''${VAR}` and define `VAR` in
            {option}`${at}.environmentFile`; the harness substitutes it at start and
            refuses to start (exit status 2) when `VAR` is not defined. `$''${` writes a literal `''${`.
          '';
        };
        allowedTools = mkOption {
          type = types.listOf types.str;
          default = [ "*" ];
          example = [
            "read_file"
            "list_directory"
          ];
          description = ''
            Tools of this server the agent may call without asking: tool names, or `"*"` for all of
            them (allowed as `mcp__${name}__<tool>`, or `mcp__${name}`).
          '';
        };
      };
    }
  );
in
{
  enable =
    if named then
      mkOption {
        type = types.bool;
        default = true;
        example = false;
        description = ''
          Whether this agent runs: its unit `hyperhive-agent-<name>.service` and its entry in the
          hive's roster. A declared agent runs unless this is false.
        '';
      }
    else
      lib.mkEnableOption "the hyperhive agent harness, which runs one coding agent turn after turn";

  package =
    if named then
      mkOption {
        type = types.package;
        default = nixosConfig.services.hyperhive.agent.package;
        defaultText = literalExpression "config.services.hyperhive.agent.package";
        description = ''
          The hyperhive package this agent's service runs. The default is the one-agent shorthand's
          {option}`services.hyperhive.agent.package` (which the flake's module builds with the host's
          own `pkgs`), whether or not the shorthand is enabled; the module installs every agent's
          package (`environment.systemPackages`).
        '';
      }
    else
      mkOption {
        type = types.package;
        default = pkgs.hyperhive;
        defaultText = literalExpression ''pkgs.callPackage "''${hyperhive}/nix/package.nix" { }'';
        description = ''
          The hyperhive package: the service (`hyperhive agent`) and the operator command `hyperhive`,
          which the module installs (`environment.systemPackages`). The flake's `nixosModules.default`
          builds it from the flake's source with the host's own `pkgs` (the default shown); with
          nix/module.nix imported alone it is `pkgs.hyperhive`, which the flake's `overlays.default`
          provides.
        '';
      };

  inherit (runtimeOptions) runtime acp;

  claude = runtimeOptions.claude // {
    package = lib.mkPackageOption pkgs "claude-code" {
      extraDescription = ''
        Used when `runtime = "claude"` and by sub-agent profiles with
        `runtime = "claude"`. Claude Code is unfree: allow it with
        `nixpkgs.config.allowUnfreePredicate`.
      '';
    };
  };

  extraMcpServers = mkOption {
    type = types.attrsOf mcpServerType;
    default = { };
    example = literalExpression ''
      {
        files = {
          command = "''${pkgs.mcp-server-filesystem}/bin/mcp-server-filesystem";
          args = [ "/srv/repo" ];
        };
        github = {
          type = "http";
          url = "https://api.githubcopilot.com/mcp/";
          headers.Authorization = "Bearer ''${GITHUB_TOKEN}";
          allowedTools = [ "get_issue" ];
        };
      }
    '';
    description = ''
      MCP servers the agent gets besides hyperhive's own `bash` server, which is always there
      (the name `bash` is reserved). Rendered to a JSON file in the store whose path the harness
      reads from `HIVE_MCP_SERVERS`.
    '';
  };

  permissions = {
    ask = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Hold the agent's permission requests for the operator, whichever its runtime: an ACP agent's
        `session/request_permission` (as {option}`${at}.acp.permissionPolicy` = "ask") and, for
        claude, every tool call its own rules neither allow nor deny (`--permission-prompt-tool`). The
        turn waits for an answer (`hyperhive permissions allow|deny`, the web view's buttons), its idle
        watchdog held; nobody answering within {option}`${at}.permissions.timeout` denies it.
        docs/permissions.md.
      '';
    };
    timeout = mkOption {
      type = seconds;
      default = 600;
      description = "Seconds a permission request waits for the operator before it is denied (and the agent told why).";
    };
  };

  idleTimeout = mkOption {
    type = seconds;
    default = 300;
    description = ''
      Seconds without any activity in a turn's stream before the watchdog cancels the turn.
      A provider error retried silently (such as HTTP 429) looks like this.
    '';
  };

  cancelGrace = mkOption {
    type = seconds;
    default = 10;
    description = "Seconds an agent may leave a cancel unanswered before it is killed.";
  };

  watchdogSec = mkOption {
    type = types.ints.unsigned;
    default = 60;
    description = ''
      systemd's `WatchdogSec=`: the harness pings systemd while its loop is alive; a hung harness is
      restarted after this many seconds. 0 disables the watchdog.
    '';
  };

  openFilesLimit = mkOption {
    type = types.ints.between 1024 1048576;
    default = 65536;
    description = ''
      systemd's `LimitNOFILE=`: how many descriptors the service, its agent and their tasks may each
      hold open (systemd's own default soft limit is 1,024). The service needs few: about 20 at rest, 4
      for each agent process it keeps (its pipes and a pidfd), 2 for each running task, 1 for each
      connection (the control socket, the HTTP tools and the web view bound theirs to a few hundred),
      none for an idle sub-agent whose agent process was released. `hyperhive status` shows the count
      against the limit, and the service logs a warning at 80% of it. What needs more is what inherits
      the limit: Node.js agents, language servers and test runners watching a repository open
      thousands of files. 65,536 leaves room for them; less than 1,024 is refused.
    '';
  };

  restrictNamespaces = mkOption {
    type = types.bool;
    default = true;
    description = ''
      Whether the agent and its tasks are kept from creating namespaces (systemd's
      `RestrictNamespaces=`). That also stops sandboxes built on unprivileged user namespaces, such
      as Claude Code's own sandbox (bubblewrap), which then fails with "No permissions to create new
      namespace".

      Set it to false to let such a sandbox run: the unit then allows namespaces, and its
      system-call filter allows what the sandbox does inside them (`@mount` for mount and
      pivot_root, `capset` to drop its capabilities); outside them the service still has no
      capabilities. The sandbox's own tools go on {option}`${at}.path` (Claude
      Code's: `pkgs.bubblewrap` and `pkgs.socat`), and the host must allow unprivileged user
      namespaces (NixOS does unless `security.allowUserNamespaces = false`).
    '';
  };

  workingDirectory = mkOption {
    type = externalPath;
    default = stateDir;
    defaultText = if named then "/var/lib/hyperhive-<name>" else stateDir;
    example = "/srv/repo";
    description = ''
      The agent's working directory (and its background tasks' default). The unit makes it writable
      (`ReadWritePaths=`) inside its otherwise read-only view of the system. It must be writable by
      {option}`${at}.user`: with the transient user (`user = null`) that means
      inside the state directory, the default. Outside it,
      {option}`${at}.createWorkingDirectory` creates it when missing.

      The service runs with `UMask=0077`, here too: what the agent and its tasks write in this
      directory (files, git objects) is readable by its user only, even in a repository that others
      share. Give the others access yourself (e.g. git's `core.sharedRepository`, which sets the
      modes of what git writes).
    '';
  };

  createWorkingDirectory = mkOption {
    type = types.bool;
    default = staticUser && !underStateDir workdir && !underHome workdir;
    defaultText = literalMD ''
      `true` when `user` is set and the working directory is neither in the state directory nor under
      `/home`, `/root` or `/run/user`
    '';
    example = true;
    description = ''
      Whether each start of the service first creates
      {option}`${at}.workingDirectory` when it is missing: owned by
      {option}`${at}.user` and its group, mode 0700 (its parents, when missing
      too, belong to root with mode 0755). An existing directory is never changed, whoever owns it.
      Without it, a missing directory fails every start (systemd's `WorkingDirectory=` and
      `ReadWritePaths=`).

      Off by default in a home directory, which belongs to a person; the state directory is created
      by systemd (`StateDirectory=`) anyway. Needs a static user: a transient user's id is not known
      before the unit starts.
    '';
  };

  environmentFile = mkOption {
    type = types.nullOr externalPath;
    default = null;
    example = "/run/secrets/hyperhive-agent.env";
    description = ''
      A file of `NAME=value` lines (systemd's `EnvironmentFile=`) read at every start: API keys for
      the agent and the values of `''${VAR}` references in MCP server headers and env. It stays out
      of the Nix store; keep it readable by root only.
    '';
  };

  credentials = mkOption {
    type = types.attrsOf externalPath;
    default = { };
    example = {
      github-token = "/run/secrets/github-token";
    };
    description = ''
      Files passed with systemd's `LoadCredential=` (readable by the service only, whatever its
      user): `NAME` appears as `$CREDENTIALS_DIRECTORY/NAME` for the agent and its tools.
    '';
  };

  extraEnvironment = mkOption {
    type = types.attrsOf types.str;
    default = { };
    example = {
      ANTHROPIC_BASE_URL = "http://127.0.0.1:4000";
    };
    description = ''
      More environment for the harness, the agent and the tasks. Values are literal (`%` is escaped
      for systemd); no secrets (they would be in the store). Names set for the unit elsewhere are
      refused: `HIVE_*` (from the other options), `PATH` (NixOS makes it from
      {option}`${at}.path`), `HOME` (the state directory) and what systemd sets
      for the unit's settings (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`, `STATE_DIRECTORY`,
      `CREDENTIALS_DIRECTORY`).
    '';
  };

  path = mkOption {
    type = types.listOf types.package;
    default = map (name: pkgs.${name}) toolbox;
    defaultText = literalExpression "with pkgs; [ ${lib.concatStringsSep " " toolbox} ]";
    example = literalExpression "options.services.hyperhive.agent.path.default ++ [ pkgs.nodejs pkgs.ripgrep ]";
    description = ''
      Packages on the service's `PATH` (their `bin` and `sbin`, in this order): what the agent, its
      MCP servers and its background shell tasks can run by name.

      The default is the userland that agents, and the commands and scripts they write, take for
      granted on any Linux machine (roughly Debian's essential set, plus git): bash; coreutils,
      findutils, grep, sed and awk; procps (`ps`, `pgrep`, `kill`) and util-linux (`setsid`,
      `flock`, `getopt`); `which`; git; tar with gzip, bzip2 and xz, for the archives found in
      repositories and releases; diff and patch. NixOS appends coreutils, findutils, grep, sed and
      systemd to every service's path.

      A definition replaces the default. To add to it, extend the default, with `options` among
      your module's arguments:
      `${at}.path = options.services.hyperhive.agent.path.default ++ [ pkgs.nodejs ];`
    '';
  };

  user = mkOption {
    type = types.nullOr types.str;
    default = null;
    example = "hyperhive";
    description = ''
      The user the service runs as. null runs it as a transient user (`DynamicUser=`)${
        lib.optionalString named " named `hyperhive-<name>` (so the agent's name may then have at most 21 characters: systemd refuses a transient user's name over 31)"
      }. A name runs it
      as that user, for a working directory owned by it:

      - a person's account the host declares (`users.users.<name>.isNormalUser = true`) is used as
        declared: the module adds nothing to it (its home, shell and groups stay the host's);
      - any other name is declared as a system user (`isSystemUser = true`, its group
        {option}`${at}.group`, its home the state directory unless declared
        elsewhere), which also suits a system user another module declares (set
        {option}`${at}.group` to its group if that is not named like it).
    '';
  };

  group = mkOption {
    type = types.nullOr types.str;
    default =
      if cfg.user == null then
        null
      else if normalUser then
        nixosConfig.users.users.${cfg.user}.group
      else
        cfg.user;
    defaultText = literalMD ''
      null without a user; for a normal user the host declares, that user's primary group
      (`users.users.<user>.group`, `"users"` unless set); otherwise a group named like the user
    '';
    description = ''
      The group a static {option}`${at}.user` runs as (`Group=`), declared as a
      group too (`users.groups`). Not null when a user is set; null without one (the transient
      `DynamicUser=` brings its own group).
    '';
  };
}
// (import ./subagents.nix { inherit lib; } at).options
// import ./web.nix { inherit lib; } at
// import ./notify.nix { inherit lib; } at
// import ./metrics.nix { inherit lib; } at
