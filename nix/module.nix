# services.hyperhive.agent: one coding agent as a supervised systemd service.
#
# Options are declared here (how an agent runs: runtime-options.nix, shared with the sub-agent profiles
# of subagents.nix; the web view's in web.nix); render.nix (pure builtins) turns them into the harness's
# HIVE_* environment, the MCP-server file and the sub-agent file, and reports every problem, which becomes
# an assertion below; harness-base.nix injects the bash MCP server. The environment is the only
# interface to the harness.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.hyperhive.agent;
  inherit (lib)
    mkOption
    types
    literalExpression
    literalMD
    ;

  stateDir = "/var/lib/hyperhive";
  workdir = toString cfg.workingDirectory;
  # A path the service may write that lives outside the read-only system view.
  underStateDir = p: p == stateDir || lib.hasPrefix "${stateDir}/" p;
  underHome = p: lib.any (h: p == h || lib.hasPrefix "${h}/" p) [
    "/home"
    "/root"
    "/run/user"
  ];
  escape = lib.replaceStrings [ "%" ] [ "%%" ];
  staticUser = cfg.user != null && cfg.group != null;
  # A person's account the host declares (isNormalUser) is used as it is: the module declares nothing
  # of it. Any other `user` is declared here as a system user. Read lazily: only the user's
  # isNormalUser, which the module never defines, so there is no cycle through users.users.
  normalUser = cfg.user != null && config.users.users.${cfg.user}.isNormalUser;
  # One argument of an Exec*= line: systemd unquotes it (C escapes) and expands `%` and `$` in it.
  execArg = s: lib.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON s);
  # Creates the working directory for the user when it is missing; an existing one is left as it is.
  createWorkdir = lib.concatStringsSep " " [
    "[ -d ${lib.escapeShellArg workdir} ] ||"
    "${pkgs.coreutils}/bin/install -d -m 0700"
    "-o ${lib.escapeShellArg (toString cfg.user)} -g ${lib.escapeShellArg (toString cfg.group)}"
    (lib.escapeShellArg workdir)
  ];
  # `+`: as root and outside the sandbox, which would need the directory to exist.
  createWorkdirCommand = "+${pkgs.bash}/bin/bash -c ${execArg createWorkdir}";

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
  runtimeOptions = shared.options "services.hyperhive.agent";

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
            {option}`services.hyperhive.agent.environmentFile`, which the harness expands at start.
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
            {option}`services.hyperhive.agent.environmentFile`; the harness substitutes it at start and
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

  rendered = import ./render.nix {
    inherit (cfg)
      runtime
      idleTimeout
      cancelGrace
      extraEnvironment
      ;
    claude = {
      command = lib.getExe cfg.claude.package;
      inherit (cfg.claude) args model;
    };
    acp = {
      inherit (cfg.acp)
        command
        args
        env
        permissionPolicy
        authMethod
        startTimeout
        ;
    };
    mcpServers = lib.mapAttrs (_: s: {
      inherit (s)
        type
        command
        args
        env
        url
        headers
        allowedTools
        ;
    }) cfg.extraMcpServers;
    # Profiles pass through as declared: render.nix gives a claude profile the agent's claude command.
    subagents = lib.mapAttrs (_: p: {
      inherit (p)
        runtime
        idleTimeout
        budget
        worktree
        delegate
        ;
      claude = {
        inherit (p.claude) args model;
      };
      acp = {
        inherit (p.acp)
          command
          args
          env
          permissionPolicy
          authMethod
          startTimeout
          ;
      };
    }) cfg.subagents;
    inherit (cfg) subagentLimits;
    web = {
      inherit (cfg.web) enable port origin;
    };
    stateDirectory = stateDir;
    workingDirectory = workdir;
    inherit (pkgs) writeText;
  };
in
{
  imports = [
    ./harness-base.nix
    ./subagents.nix
    ./web.nix
  ];

  options.services.hyperhive.agent = {
    enable = lib.mkEnableOption "the hyperhive agent harness, which runs one coding agent turn after turn";

    package = mkOption {
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
        capabilities. The sandbox's own tools go on {option}`services.hyperhive.agent.path` (Claude
        Code's: `pkgs.bubblewrap` and `pkgs.socat`), and the host must allow unprivileged user
        namespaces (NixOS does unless `security.allowUserNamespaces = false`).
      '';
    };

    workingDirectory = mkOption {
      type = externalPath;
      default = stateDir;
      example = "/srv/repo";
      description = ''
        The agent's working directory (and its background tasks' default). The unit makes it writable
        (`ReadWritePaths=`) inside its otherwise read-only view of the system. It must be writable by
        {option}`services.hyperhive.agent.user`: with the transient user (`user = null`) that means
        inside the state directory, the default. Outside it,
        {option}`services.hyperhive.agent.createWorkingDirectory` creates it when missing.

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
        {option}`services.hyperhive.agent.workingDirectory` when it is missing: owned by
        {option}`services.hyperhive.agent.user` and its group, mode 0700 (its parents, when missing
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
        {option}`services.hyperhive.agent.path`), `HOME` (the state directory) and what systemd sets
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
        `services.hyperhive.agent.path = options.services.hyperhive.agent.path.default ++ [ pkgs.nodejs ];`
      '';
    };

    user = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "hyperhive";
      description = ''
        The user the service runs as. null runs it as a transient user (`DynamicUser=`). A name runs it
        as that user, for a working directory owned by it:

        - a person's account the host declares (`users.users.<name>.isNormalUser = true`) is used as
          declared: the module adds nothing to it (its home, shell and groups stay the host's);
        - any other name is declared as a system user (`isSystemUser = true`, its group
          {option}`services.hyperhive.agent.group`, its home the state directory unless declared
          elsewhere), which also suits a system user another module declares (set
          {option}`services.hyperhive.agent.group` to its group if that is not named like it).
      '';
    };

    group = mkOption {
      type = types.nullOr types.str;
      default =
        if cfg.user == null then
          null
        else if normalUser then
          config.users.users.${cfg.user}.group
        else
          cfg.user;
      defaultText = literalMD ''
        null without a user; for a normal user the host declares, that user's primary group
        (`users.users.<user>.group`, `"users"` unless set); otherwise a group named like the user
      '';
      description = ''
        The group a static {option}`services.hyperhive.agent.user` runs as (`Group=`), declared as a
        group too (`users.groups`). Not null when a user is set; null without one (the transient
        `DynamicUser=` brings its own group).
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    assertions =
      map (problem: {
        assertion = false;
        message = "services.hyperhive.agent: ${problem}";
      }) rendered.problems
      ++ [
        {
          assertion = cfg.user == null || cfg.group != null;
          message = "services.hyperhive.agent: user = \"${toString cfg.user}\" needs a group, but group = null; remove group = null (the default is a group named like the user, created with it) or name an existing group";
        }
        {
          assertion = cfg.user != null || cfg.group == null;
          message = "services.hyperhive.agent: group = \"${toString cfg.group}\" needs user to be set too (without a user the service runs as a transient DynamicUser with its own group)";
        }
        {
          assertion = !cfg.createWorkingDirectory || staticUser;
          message = "services.hyperhive.agent: createWorkingDirectory needs user (and group) to be set: the directory is created for them, and a transient DynamicUser's id is not known before the unit starts; set user, or createWorkingDirectory = false and workingDirectory inside ${stateDir}";
        }
      ];

    # The operator command, for root's `hyperhive send|status|outbox`, and where it finds the service.
    environment.systemPackages = [ cfg.package ];
    environment.sessionVariables.HIVE_STATE_DIR = lib.mkDefault stateDir;

    # A system user unless the host declares a person's account of that name. The condition reads
    # users.users, so it sits on each value, which only that option reads: on the user's attribute
    # itself, users.users' names would depend on its own values. normalUser comes first: a normal
    # user's group (the default of `group`) is read through this very definition. Only a complete
    # static identity is declared; an incomplete one fails the assertions above.
    users.users = lib.optionalAttrs (cfg.user != null) {
      ${cfg.user} = lib.mapAttrs (_: lib.mkIf (!normalUser && staticUser)) {
        isSystemUser = true;
        inherit (cfg) group;
        # A system user declared elsewhere keeps its own home.
        home = lib.mkDefault stateDir;
      };
    };
    users.groups = lib.mkIf staticUser { ${cfg.group} = { }; };

    systemd.services.hyperhive-agent = {
      description = "hyperhive agent (${cfg.runtime} runtime)";
      wantedBy = [ "multi-user.target" ];
      after = [ "network-online.target" ];
      wants = [ "network-online.target" ];
      inherit (cfg) path;
      inherit (rendered) environment;
      serviceConfig = {
        # READY=1 once serving, STATUS= lines, WATCHDOG=1 pings (hyperhive agent speaks sd_notify).
        Type = "notify";
        NotifyAccess = "main";
        ExecStartPre = lib.optional cfg.createWorkingDirectory createWorkdirCommand;
        ExecStart = "${lib.getExe cfg.package} agent";
        WatchdogSec = cfg.watchdogSec;
        LimitNOFILE = cfg.openFilesLimit;
        # SIGTERM to the harness alone: it cancels the turn, ends its tasks (process groups and their
        # cgroups) and exits 0; whatever is left afterwards gets SIGKILL.
        KillMode = "mixed";
        TimeoutStopSec = "45s";
        # The harness gives each background task its own cgroup below the unit's (HIVE_CGROUP=auto), so
        # a kill reaches everything a task started, setsid or not.
        Delegate = true;
        Restart = "on-failure";
        RestartSec = "1s";
        RestartSteps = 8;
        RestartMaxDelaySec = "2min";
        # Exit status 2 is bad configuration: restarting cannot fix it, so no restart loop.
        RestartPreventExitStatus = 2;
        StateDirectory = "hyperhive";
        StateDirectoryMode = "0700";
        # `-`: a missing directory does not fail the ExecStartPre= that creates it.
        WorkingDirectory = lib.optionalString cfg.createWorkingDirectory "-" + escape workdir;
        # A static user must be named: DynamicUser=false alone runs the service as root.
        DynamicUser = !staticUser;
        User = lib.mkIf staticUser cfg.user;
        Group = lib.mkIf staticUser cfg.group;
        EnvironmentFile = lib.optional (cfg.environmentFile != null) (toString cfg.environmentFile);
        LoadCredential = lib.mapAttrsToList (n: p: "${n}:${toString p}") cfg.credentials;
        UMask = "0077";

        # Hardening. Exceptions to the usual nixpkgs block, each for a reason:
        # - MemoryDenyWriteExecute stays off: Node-based agents (claude, opencode, claude-agent-acp) run
        #   V8, whose JIT maps memory writable and executable; with it on they abort at start.
        # - ProtectControlGroups stays off: Delegate=yes hands the harness its cgroup subtree, which it
        #   must write (task cgroups, cgroup.kill); the setting would mount /sys/fs/cgroup read-only.
        # - PrivateUsers stays off: tasks run git and builds in repositories owned by real users, whom
        #   a private user namespace shows as "nobody" (git then refuses: "dubious ownership").
        # - ProcSubset stays "all": Node reads /proc/cpuinfo and /proc/meminfo (os.cpus()), and tasks
        #   run arbitrary tools that read /proc/sys.
        # - RestrictAddressFamilies includes AF_NETLINK: Node's os.networkInterfaces() uses it.
        # - SystemCallFilter keeps @system-service (no ~@resources): Node and build tools set
        #   priorities and affinities.
        # - restrictNamespaces = false (an agent's own sandbox, e.g. Claude Code's bubblewrap) lifts
        #   RestrictNamespaces and adds @mount and capset to SystemCallFilter: bubblewrap mounts,
        #   pivots and drops capabilities inside its user namespace; without @mount it fails ("Failed
        #   to make / slave"), without capset it hangs (measured under this unit, systemd 252).
        NoNewPrivileges = true;
        ProtectSystem = "strict";
        ProtectHome = if underHome workdir then "read-only" else true;
        # `-` with createWorkingDirectory: systemd 252 sets up the paths for a `+` command too, before it
        # has created the directory.
        ReadWritePaths = lib.optional (!underStateDir workdir) (
          lib.optionalString cfg.createWorkingDirectory "-" + escape workdir
        );
        PrivateTmp = true;
        PrivateDevices = true;
        DevicePolicy = "closed";
        ProtectKernelTunables = true;
        ProtectKernelModules = true;
        ProtectKernelLogs = true;
        ProtectClock = true;
        ProtectHostname = true;
        ProtectProc = "invisible";
        LockPersonality = true;
        RestrictRealtime = true;
        RestrictSUIDSGID = true;
        RestrictNamespaces = cfg.restrictNamespaces;
        RemoveIPC = true;
        CapabilityBoundingSet = [ "" ];
        AmbientCapabilities = [ "" ];
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
          "AF_NETLINK"
        ];
        SystemCallArchitectures = "native";
        SystemCallFilter = [
          "@system-service"
          "~@privileged"
        ]
        ++ lib.optionals (!cfg.restrictNamespaces) [
          "@mount"
          "capset"
        ];
        SystemCallErrorNumber = "EPERM";
        MemoryDenyWriteExecute = false;
      };
    };
  };

}
