# One agent's systemd service, for the one-agent shorthand (module.nix: hyperhive-agent.service,
# /var/lib/hyperhive) and for each agent of the hive (hive.nix: hyperhive-agent-<name>.service,
# /var/lib/hyperhive-<name>): render.nix's environment and files, the unit with its hardening, and the
# problems of the agent's identity, in option terms below the agent's path (the caller prefixes them).
{ lib, pkgs }:
{
  # The agent's options (agent-options.nix).
  cfg,
  # The agent's state directory, and its StateDirectory= (below /var/lib).
  stateDir,
  stateDirectoryName,
  # Every MCP server the agent gets, hyperhive's bash server included, as declared (by name).
  mcpServers,
  # An agent of the hive: { name, roster (the roster file), runtimeDirectory (below /run), credentials
  # (more LoadCredential= files, by name) }; null for
  # the shorthand, which has no hive.
  hive ? null,
}:
let
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
  # The transient user of a hive agent (the roster's `user` for it).
  dynamicUser = "hyperhive-${hive.name}";
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
    }) mcpServers;
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
    permissions = {
      inherit (cfg.permissions) ask timeout;
    };
    notify = {
      inherit (cfg.notify) command timeout concurrency backlog;
    };
    metrics = {
      inherit (cfg.metrics) enable port address openFirewall;
    };
    stateDirectory = stateDir;
    workingDirectory = workdir;
    inherit (pkgs) writeText;
    hive = if hive == null then null else { inherit (hive) name roster; };
  };

in
{
  inherit rendered staticUser;

  # The problems of the agent's own settings: render.nix's, then its identity's.
  problems = rendered.problems ++ lib.optionals (!(cfg.user == null || cfg.group != null)) [
    "user = \"${toString cfg.user}\" needs a group, but group = null; remove group = null (the default is a group named like the user, created with it) or name an existing group"
  ] ++ lib.optionals (!(cfg.user != null || cfg.group == null)) [
    "group = \"${toString cfg.group}\" needs user to be set too (without a user the service runs as a transient DynamicUser with its own group)"
  ] ++ lib.optionals (!(!cfg.createWorkingDirectory || staticUser)) [
    "createWorkingDirectory needs user (and group) to be set: the directory is created for them, and a transient DynamicUser's id is not known before the unit starts; set user, or createWorkingDirectory = false and workingDirectory inside ${stateDir}"
  ];

  service = {
    description = "hyperhive agent ${lib.optionalString (hive != null) "${hive.name} "}(${cfg.runtime} runtime)";
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
      StateDirectory = stateDirectoryName;
      StateDirectoryMode = "0700";
      # `-`: a missing directory does not fail the ExecStartPre= that creates it.
      WorkingDirectory = lib.optionalString cfg.createWorkingDirectory "-" + escape workdir;
      # A static user must be named: DynamicUser=false alone runs the service as root.
      DynamicUser = !staticUser;
      # A hive agent's transient user has its own name, the roster's `user` (hyperhive-<name>); the
      # shorthand's is named after the unit.
      User = lib.mkIf (staticUser || hive != null) (if staticUser then cfg.user else dynamicUser);
      Group = lib.mkIf staticUser cfg.group;
      EnvironmentFile = lib.optional (cfg.environmentFile != null) (toString cfg.environmentFile);
      # A hive agent's also the broker's password and TLS files (hive.nix: nats-password, nats-tls-*).
      LoadCredential = lib.mapAttrsToList (n: p: "${n}:${toString p}") (
        cfg.credentials // lib.optionalAttrs (hive != null) (hive.credentials or { })
      );
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
    }
    # The hive: the agent's socket lives in /run/hyperhive-hive/<name>, its own directory (the parent
    # belongs to root), readable by all so that every agent reaches every socket (whose own mode says
    # who may connect). ProtectSystem=strict leaves /run readable, and connect() to a socket on a
    # read-only mount works; AF_UNIX is allowed and PrivateUsers is off, so the receiver sees the
    # sender's real uid (SO_PEERCRED). Measured under Debian's systemd 252 in the rig.
    // lib.optionalAttrs (hive != null) {
      RuntimeDirectory = hive.runtimeDirectory;
      RuntimeDirectoryMode = "0755";
    };
  };
}
