# Options in, the harness's `HIVE_*` environment and its MCP-server file out.
#
# Pure builtins: no nixpkgs, no lib, so Debian's Nix 2.8 and the Python tests (tests/nix) check every
# line of it offline. The NixOS module (module.nix) is a thin layer of typed options around one call.
#
# Every problem is collected into `problems` (messages in option terms, e.g. "acp.command ..."): the
# module turns each into an assertion, and a direct caller gets them all in one `throw` when it forces
# `environment` or `mcpJson`.
#
# systemd expands `%` specifiers in `Environment=` and NixOS writes the values unescaped (nixpkgs issue
# #180190), so every value is escaped here (`%` -> `%%`); quotes, backslashes and newlines are left to
# NixOS's own quoting (`Environment="NAME=value"`, C-style escapes), which systemd undoes exactly.
# Structured data too large for a line, or carrying secrets' references (the MCP list), goes to a file
# and only its path goes into the environment; so do the sub-agent profiles.
{
  runtime ? "claude",
  claude ? { },
  acp ? { },
  # Every MCP server the agent gets, `bash` included (harness-base.nix injects it), by name.
  mcpServers ? { },
  stateDirectory ? "/var/lib/hyperhive",
  workingDirectory ? stateDirectory,
  idleTimeout ? null,
  cancelGrace ? null,
  # Sub-agent profiles by name, each with the agent's runtime settings (runtime, claude.{args,model},
  # acp, idleTimeout) plus budget, worktree and delegate; a claude profile runs claude.command.
  subagents ? { },
  # maxConcurrent, maxDepth, budget, idleRelease, idleAgents; null (or absent) leaves the harness's default.
  subagentLimits ? { },
  # The web view: enable, port (0 to 65535), origin (null or what a reverse proxy serves it under).
  web ? { },
  # Permission requests held for the operator (docs/permissions.md): ask (true: either runtime's requests
  # wait for an answer), timeout (seconds until one is denied; null leaves the harness's 600).
  permissions ? { },
  # The operator's notifications: command (null, or the argv as a list of strings), timeout, concurrency,
  # backlog (each null, or absent, for the harness's default).
  notify ? { },
  # The metrics endpoint: enable, port (0 to 65535), address (an IP address), openFirewall (the module
  # opens the port; here only checked against a loopback address).
  metrics ? { },
  # HIVE_CGROUP: "auto" gives each task its own cgroup under the unit's delegated one; "off" does not.
  cgroup ? "auto",
  # An agent of the hive (docs/hive.md): { roster (the roster file, HIVE_HIVE), name (its entry,
  # HIVE_AGENT_NAME) }; null for an agent alone (the one-agent shorthand).
  hive ? null,
  extraEnvironment ? { },
  # name -> text -> path of a file holding text. The module passes pkgs.writeText (the JSON names the
  # package's store path, which builtins.toFile refuses); fixtures without store paths use the default.
  writeText ? builtins.toFile,
}:
let
  inherit (builtins)
    attrNames
    concatLists
    concatStringsSep
    elem
    filter
    isAttrs
    isBool
    isFloat
    isInt
    isList
    isString
    length
    mapAttrs
    match
    removeAttrs
    replaceStrings
    toJSON
    ;

  # What an unset runtime field means, for the agent and for every profile alike.
  claudeDefaults = {
    args = [ ];
    model = null;
  };
  acpDefaults = {
    command = null;
    args = [ ];
    env = { };
    permissionPolicy = "allow";
    authMethod = null;
    startTimeout = null;
  };
  claudeCfg = {
    command = "claude";
  }
  // claudeDefaults
  // claude;
  acpCfg = acpDefaults // acp;
  limitDefaults = {
    maxConcurrent = null;
    maxDepth = null;
    budget = null;
    idleRelease = null;
    idleAgents = null;
  };
  limitsCfg = limitDefaults // subagentLimits;
  webDefaults = {
    enable = false;
    port = 8377;
    origin = null;
  };
  webCfg = webDefaults // web;
  notifyDefaults = {
    command = null;
    timeout = null;
    concurrency = null;
    backlog = null;
  };
  notifyCfg = notifyDefaults // notify;
  metricsDefaults = {
    enable = false;
    port = 9464;
    address = "127.0.0.1";
    openFirewall = false;
  };
  metricsCfg = metricsDefaults // metrics;
  profileDefaults = {
    runtime = "claude";
    claude = { };
    acp = { };
    idleTimeout = null;
    budget = null;
    worktree = false;
    delegate = false;
  };
  # A profile with every field, its claude and acp records completed as the agent's are.
  profileCfg =
    p:
    let
      c = profileDefaults // p;
    in
    c
    // {
      claude = claudeDefaults // c.claude;
      acp = acpDefaults // c.acp;
    };

  escape = replaceStrings [ "%" ] [ "%%" ];
  isStrList = l: isList l && builtins.all isString l;
  isStrAttrs = a: isAttrs a && builtins.all isString (builtins.attrValues a);
  positive = x: (isInt x || isFloat x) && x > 0;
  positiveInt = x: isInt x && x > 0;
  envName = n: match "[A-Za-z_][A-Za-z0-9_]*" n != null;
  # Tool names are mcp__<server>__<tool>: a server name must be one word without a double underscore.
  serverNameOk = n: match "[A-Za-z0-9][A-Za-z0-9_-]*" n != null && match ".*__.*" n == null;

  serverType = s: s.type or "stdio";

  serverProblems =
    name: s:
    let
      at = "extraMcpServers.${name}";
      t = serverType s;
      stdioFields = [
        "command"
        "args"
        "env"
      ];
      httpFields = [
        "url"
        "headers"
      ];
      setFields = filter (f: (s.${f} or null) != null && s.${f} != [ ] && s.${f} != { }) (attrNames s);
      misplaced =
        if t == "http" then
          filter (f: elem f stdioFields) setFields
        else if t == "stdio" then
          filter (f: elem f httpFields) setFields
        else
          [ ];
    in
    (if serverNameOk name then
      [ ]
    else
      [
        "${at}: server name '${name}' must be letters, digits, '-' or '_' without '__' (tools are named mcp__${name}__<tool>)"
      ]
    )
    ++ (
      if !(elem t [
        "stdio"
        "http"
      ])
      then
        [ "${at}.type must be \"stdio\" or \"http\", got \"${toString t}\"" ]
      else if t == "stdio" && !(isString (s.command or null) && s.command != "") then
        [ "${at}: a stdio server needs command (the executable to start)" ]
      else if t == "http" && !(isString (s.url or null) && s.url != "") then
        [ "${at}: an http server needs url (e.g. \"http://127.0.0.1:8080/mcp\")" ]
      else
        [ ]
    )
    ++ map (f: "${at}.${f} is only for ${if t == "http" then "stdio" else "http"} servers; remove it or set type") misplaced
    ++ (
      let
        tools = s.allowedTools or [ "*" ];
      in
      if isStrList tools && tools != [ ] && !(elem "" tools) then
        [ ]
      else
        [ "${at}.allowedTools must be a non-empty list of tool names (or [ \"*\" ] for every tool)" ]
    )
    ++ (if isStrList (s.args or [ ]) then [ ] else [ "${at}.args must be a list of strings" ])
    ++ (if isStrAttrs (s.env or { }) then [ ] else [ "${at}.env must be an attribute set of strings" ])
    ++ (if isStrAttrs (s.headers or { }) then [ ] else [ "${at}.headers must be an attribute set of strings" ]);

  # The file's shape: stdio servers carry no "type"; empty fields are written anyway so
  # the file reads the same whoever made it.
  serverJson =
    s:
    let
      tools = {
        allowedTools = s.allowedTools or [ "*" ];
      };
    in
    if serverType s == "http" then
      {
        type = "http";
        inherit (s) url;
        headers = s.headers or { };
      }
      // tools
    else
      {
        inherit (s) command;
        args = s.args or [ ];
        env = s.env or { };
      }
      // tools;

  managed = [
    "HIVE_RUNTIME"
    "HIVE_STATE_DIR"
    "HIVE_WORKDIR"
    "HIVE_MCP_SERVERS"
    "HIVE_CGROUP"
    "HIVE_IDLE_TIMEOUT"
    "HIVE_CANCEL_GRACE"
    "HIVE_ACP_COMMAND"
    "HIVE_ACP_ARGS"
    "HIVE_ACP_ENV"
    "HIVE_ACP_PERMISSION_POLICY"
    "HIVE_PERMISSION_POLICY"
    "HIVE_PERMISSION_TIMEOUT"
    "HIVE_ACP_AUTH_METHOD"
    "HIVE_ACP_START_TIMEOUT"
    "HIVE_CLAUDE_COMMAND"
    "HIVE_CLAUDE_ARGS"
    "HIVE_SOCKET"
    "HIVE_SUBAGENTS"
    "HIVE_SUBAGENT_MAX_CONCURRENT"
    "HIVE_SUBAGENT_MAX_DEPTH"
    "HIVE_SUBAGENT_BUDGET"
    "HIVE_SUBAGENT_IDLE_RELEASE"
    "HIVE_SUBAGENT_IDLE_AGENTS"
    "HIVE_WEB_PORT"
    "HIVE_WEB_ORIGIN"
    "HIVE_NOTIFY_COMMAND"
    "HIVE_NOTIFY_TIMEOUT"
    "HIVE_NOTIFY_CONCURRENCY"
    "HIVE_NOTIFY_BACKLOG"
    "HIVE_METRICS_PORT"
    "HIVE_METRICS_ADDRESS"
    "HIVE_HIVE"
    "HIVE_AGENT_NAME"
  ];
  # The option that sets each managed variable, for the message when extraEnvironment tries to.
  optionFor = {
    HIVE_RUNTIME = "runtime";
    HIVE_STATE_DIR = "the unit's StateDirectory";
    HIVE_WORKDIR = "workingDirectory";
    HIVE_MCP_SERVERS = "extraMcpServers";
    HIVE_CGROUP = "the unit (Delegate=yes)";
    HIVE_IDLE_TIMEOUT = "idleTimeout";
    HIVE_CANCEL_GRACE = "cancelGrace";
    HIVE_ACP_COMMAND = "acp.command";
    HIVE_ACP_ARGS = "acp.args";
    HIVE_ACP_ENV = "acp.env";
    HIVE_ACP_PERMISSION_POLICY = "acp.permissionPolicy and permissions.ask";
    HIVE_PERMISSION_POLICY = "permissions.ask";
    HIVE_PERMISSION_TIMEOUT = "permissions.timeout";
    HIVE_ACP_AUTH_METHOD = "acp.authMethod";
    HIVE_ACP_START_TIMEOUT = "acp.startTimeout";
    HIVE_CLAUDE_COMMAND = "claude.package";
    HIVE_CLAUDE_ARGS = "claude.args and claude.model";
    HIVE_SOCKET = "the harness itself (it sets it for its children)";
    HIVE_SUBAGENTS = "subagents";
    HIVE_SUBAGENT_MAX_CONCURRENT = "subagentLimits.maxConcurrent";
    HIVE_SUBAGENT_MAX_DEPTH = "subagentLimits.maxDepth";
    HIVE_SUBAGENT_BUDGET = "subagentLimits.budget";
    HIVE_SUBAGENT_IDLE_RELEASE = "subagentLimits.idleRelease";
    HIVE_SUBAGENT_IDLE_AGENTS = "subagentLimits.idleAgents";
    HIVE_WEB_PORT = "web.enable and web.port";
    HIVE_WEB_ORIGIN = "web.origin";
    HIVE_NOTIFY_COMMAND = "notify.command";
    HIVE_NOTIFY_TIMEOUT = "notify.timeout";
    HIVE_NOTIFY_CONCURRENCY = "notify.concurrency";
    HIVE_NOTIFY_BACKLOG = "notify.backlog";
    HIVE_METRICS_PORT = "metrics.enable and metrics.port";
    HIVE_METRICS_ADDRESS = "metrics.address";
    HIVE_HIVE = "services.hyperhive.agents (the hive's roster)";
    HIVE_AGENT_NAME = "the agent's name in services.hyperhive.agents";
  };

  # Variables set for the unit by something other than these settings, each with where its value
  # comes from. NixOS writes PATH from the unit's `path` (nixos/lib/systemd-lib.nix) at normal
  # priority, so a second definition fails the build ("conflicting definition values"); systemd sets
  # the others at start for the unit's own settings, where a value from Environment= would break
  # the harness's link to systemd or hide the unit's directories.
  unitSet = {
    PATH = "set by NixOS from path (bin and sbin of each package); add packages to path instead";
    HOME = "set by the module to the state directory (${toString stateDirectory}); it is not configurable";
    NOTIFY_SOCKET = "set by systemd for this unit (Type=notify: readiness and watchdog pings); remove it";
    WATCHDOG_USEC = "set by systemd for this unit from watchdogSec; use that option instead";
    WATCHDOG_PID = "set by systemd for this unit (the watchdog's main process); remove it";
    STATE_DIRECTORY = "set by systemd for this unit (StateDirectory=); remove it";
    CREDENTIALS_DIRECTORY = "set by systemd for this unit from credentials; use that option instead";
  };

  absolute = p: isString p && match "/.*" p != null;

  # The problems of one agent's runtime settings (the service's, p = "", or a profile's, p =
  # "subagents.<name>."), each message naming the option by its full path below the module.
  runtimeProblems =
    p:
    {
      runtime,
      claude,
      acp,
      idleTimeout,
    }:
    concatLists [
      (
        if
          elem runtime [
            "claude"
            "acp"
          ]
        then
          [ ]
        else
          [ "${p}runtime must be \"claude\" or \"acp\", got \"${toString runtime}\"" ]
      )
      (
        if runtime == "acp" && !(isString acp.command && acp.command != "") then
          [
            "${p}runtime = \"acp\" needs ${p}acp.command, the ACP agent's executable (e.g. ${p}acp.command = \"\${pkgs.opencode}/bin/opencode\"; ${p}acp.args = [ \"acp\" ];)"
          ]
        else
          [ ]
      )
      (if isStrList acp.args then [ ] else [ "${p}acp.args must be a list of strings" ])
      (if isStrList claude.args then [ ] else [ "${p}claude.args must be a list of strings" ])
      (
        if isStrAttrs acp.env then
          map (n: "${p}acp.env: '${n}' is not a valid environment variable name") (
            filter (n: !(envName n)) (attrNames acp.env)
          )
        else
          [ "${p}acp.env must be an attribute set of strings" ]
      )
      (
        if
          elem acp.permissionPolicy [
            "allow"
            "deny"
            "ask"
          ]
        then
          [ ]
        else
          [
            "${p}acp.permissionPolicy must be \"allow\", \"deny\" or \"ask\", got \"${toString acp.permissionPolicy}\""
          ]
      )
      (
        if acp.authMethod == null || (isString acp.authMethod && acp.authMethod != "") then
          [ ]
        else
          [ "${p}acp.authMethod must be null or a non-empty auth method id" ]
      )
      (
        if acp.startTimeout == null || positive acp.startTimeout then
          [ ]
        else
          [ "${p}acp.startTimeout must be a positive number of seconds" ]
      )
      (
        if idleTimeout == null || positive idleTimeout then
          [ ]
        else
          [ "${p}idleTimeout must be a positive number of seconds" ]
      )
    ];

  # Fields a direct caller may give a record, so that a misspelt one is refused rather than ignored
  # (the module's typed options cannot produce one).
  unknownFields =
    at: known: a:
    map (f: "${at}: unknown setting '${f}' (known: ${concatStringsSep ", " (attrNames known)})") (
      filter (f: !(known ? ${f})) (attrNames a)
    );

  # A profile's settings of the runtime it does not use, by field. The runtime defaults to claude, so
  # a profile given only acp.command would otherwise run claude without a word. (acp.permissionPolicy
  # and acp.startTimeout are left out: the module always sets them.)
  runtimeFields = {
    claude = [
      "args"
      "model"
    ];
    acp = [
      "command"
      "args"
      "env"
      "authMethod"
    ];
  };
  otherRuntimeFields =
    p: c:
    let
      other = if c.runtime == "acp" then "claude" else "acp";
      defaults = if other == "acp" then acpDefaults else claudeDefaults;
    in
    # An unknown runtime is its own problem; which settings it would leave unused is moot.
    if c.runtime != "claude" && c.runtime != "acp" then
      [ ]
    else
      map (
        f:
        "${p}${other}.${f} is only for runtime = \"${other}\" profiles; set ${p}runtime = \"${other}\" or remove it"
      ) (filter (f: c.${other}.${f} != defaults.${f}) runtimeFields.${other});

  profileProblems =
    name: p:
    let
      at = "subagents.${name}";
      notAttrs = filter (r: !(isAttrs (p.${r} or { }))) [
        "claude"
        "acp"
      ];
      c = profileCfg p;
    in
    (
      if match "[a-z][a-z0-9-]{0,31}" name != null then
        [ ]
      else
        [
          "${at}: profile name '${name}' must be a lowercase letter followed by up to 31 lowercase letters, digits or '-' (e.g. code-reviewer)"
        ]
    )
    ++ (
      if !(isAttrs p) then
        [ "${at} must be an attribute set of settings" ]
      else if notAttrs != [ ] then
        map (r: "${at}.${r} must be an attribute set") notAttrs
      else
        unknownFields at profileDefaults p
        ++ unknownFields "${at}.claude" claudeDefaults (p.claude or { })
        ++ unknownFields "${at}.acp" acpDefaults (p.acp or { })
        ++ runtimeProblems "${at}." {
          inherit (c)
            runtime
            claude
            acp
            idleTimeout
            ;
        }
        ++ otherRuntimeFields "${at}." c
        ++ (
          if c.budget == null || positiveInt c.budget then
            [ ]
          else
            [ "${at}.budget must be null or a positive whole number of seconds" ]
        )
        ++ map (f: "${at}.${f} must be true or false") (
          filter (f: !(isBool c.${f})) [
            "worktree"
            "delegate"
          ]
        )
    );

  limitProblems =
    unknownFields "subagentLimits" limitDefaults subagentLimits
    ++ map (f: "subagentLimits.${f} must be a positive whole number") (
      filter (f: !(limitsCfg.${f} == null || positiveInt limitsCfg.${f})) (
        attrNames (removeAttrs limitDefaults [ "idleAgents" ])
      )
    )
    ++ (
      if limitsCfg.idleAgents == null || (isInt limitsCfg.idleAgents && limitsCfg.idleAgents >= 0) then
        [ ]
      else
        [ "subagentLimits.idleAgents must be a whole number, 0 or more" ]
    );

  # An origin as a browser sends it: http(s), a host (or [IPv6]), an optional port, nothing after.
  originOk =
    o:
    isString o
    && match "https?://([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\\[[0-9A-Fa-f:.]+])(:[0-9]{1,5})?" o != null;
  webProblems =
    unknownFields "web" webDefaults web
    ++ (if isBool webCfg.enable then [ ] else [ "web.enable must be true or false" ])
    ++ (
      if isInt webCfg.port && webCfg.port >= 0 && webCfg.port <= 65535 then
        [ ]
      else
        [ "web.port must be a TCP port (0 to 65535; 0 takes a free one)" ]
    )
    ++ (
      if webCfg.origin == null || originOk webCfg.origin then
        [ ]
      else
        [
          "web.origin must be an origin such as \"https://agent.example.com\" (scheme, host, optional port; no path)"
        ]
    )
    ++ (
      if webCfg.origin != null && webCfg.enable != true then
        [ "web.origin is set but web.enable is not: the web view is not served" ]
      else
        [ ]
    );

  permissionDefaults = {
    ask = false;
    timeout = null;
  };
  permissionsCfg = permissionDefaults // permissions;
  permissionProblems =
    unknownFields "permissions" permissionDefaults permissions
    ++ (if isBool permissionsCfg.ask then [ ] else [ "permissions.ask must be true or false" ])
    ++ (
      if permissionsCfg.timeout == null || positive permissionsCfg.timeout then
        [ ]
      else
        [ "permissions.timeout must be a positive number of seconds" ]
    );
  asks = permissionsCfg.ask == true;

  notifyProblems =
    let
      command = notifyCfg.command;
      argv = isStrList command && command != [ ] && builtins.head command != "";
      count =
        n:
        if notifyCfg.${n} == null || positiveInt notifyCfg.${n} then
          [ ]
        else
          [ "notify.${n} must be a whole number, 1 or more" ];
    in
    unknownFields "notify" notifyDefaults notify
    ++ (
      if command == null || argv then
        [ ]
      else
        [ "notify.command must be null or a non-empty list of strings, the program first" ]
    )
    ++ (
      if notifyCfg.timeout == null || positive notifyCfg.timeout then
        [ ]
      else
        [ "notify.timeout must be a positive number of seconds" ]
    )
    ++ count "concurrency"
    ++ count "backlog";
  # An IP address as config.py takes it (Python's ipaddress): dotted IPv4, or IPv6 (hex groups and colons,
  # an IPv4 tail allowed); no brackets, no port, no host name.
  octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  ipv4Ok = a: match "${octet}(\\.${octet}){3}" a != null;
  ipv6Ok = a: match "[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*" a != null && match ".*:::.*" a == null;
  ipOk = a: isString a && (ipv4Ok a || ipv6Ok a);
  loopback = a: match "127\\..*" a != null || a == "::1";
  metricsProblems =
    unknownFields "metrics" metricsDefaults metrics
    ++ (if isBool metricsCfg.enable then [ ] else [ "metrics.enable must be true or false" ])
    ++ (if isBool metricsCfg.openFirewall then [ ] else [ "metrics.openFirewall must be true or false" ])
    ++ (
      if isInt metricsCfg.port && metricsCfg.port >= 0 && metricsCfg.port <= 65535 then
        [ ]
      else
        [ "metrics.port must be a TCP port (0 to 65535; 0 takes a free one)" ]
    )
    ++ (
      if ipOk metricsCfg.address then
        [ ]
      else
        [
          "metrics.address must be an IP address to listen on, such as \"127.0.0.1\", \"0.0.0.0\" or \"::\" (no port, no host name)"
        ]
    )
    ++ (
      if
        metricsCfg.openFirewall == true
        && metricsCfg.enable == true
        && ipOk metricsCfg.address
        && loopback metricsCfg.address
      then
        [
          "metrics.openFirewall is set but metrics.address is ${metricsCfg.address}, a loopback address no other host reaches; set metrics.address to the address the scraper reaches this host by (or \"0.0.0.0\" for every interface), or leave openFirewall off for a scraper on this host"
        ]
      else
        [ ]
    )
    ++ (
      if metricsCfg.openFirewall == true && metricsCfg.enable == true && metricsCfg.port == 0 then
        [ "metrics.openFirewall is set but metrics.port is 0 (a port picked at start): set a fixed port to open" ]
      else
        [ ]
    );

  problems = concatLists [
    (runtimeProblems "" {
      inherit runtime idleTimeout;
      claude = claudeCfg;
      acp = acpCfg;
    })
    (
      if
        elem cgroup [
          "auto"
          "off"
        ]
      then
        [ ]
      else
        [ "cgroup must be \"auto\" or \"off\"" ]
    )
    (
      if cancelGrace == null || positive cancelGrace then
        [ ]
      else
        [ "cancelGrace must be a positive number of seconds" ]
    )
    (if absolute workingDirectory then [ ] else [ "workingDirectory must be an absolute path" ])
    (if absolute stateDirectory then [ ] else [ "the state directory must be an absolute path" ])
    (concatLists (map (n: serverProblems n mcpServers.${n}) (attrNames mcpServers)))
    (
      if isAttrs subagents then
        concatLists (map (n: profileProblems n subagents.${n}) (attrNames subagents))
      else
        [ "subagents must be an attribute set of profiles" ]
    )
    limitProblems
    webProblems
    permissionProblems
    notifyProblems
    metricsProblems
    (
      if
        # Not forced further: the roster file throws its own problems, which hive.nix reports.
        hive == null || (isAttrs hive && hive ? roster && hive ? name)
      then
        [ ]
      else
        [ "hive must be null or { roster = <the roster file>; name = <the agent's name>; }" ]
    )
    (map (n: "extraEnvironment.${n}: set by the module from ${optionFor.${n}}; use that option instead") (
      filter (n: elem n managed) (attrNames extraEnvironment)
    ))
    (map (n: "extraEnvironment.${n}: ${unitSet.${n}}") (
      filter (n: unitSet ? ${n}) (attrNames extraEnvironment)
    ))
    (if isStrAttrs extraEnvironment then [ ] else [ "extraEnvironment must be an attribute set of strings" ])
    (map (n: "extraEnvironment: '${n}' is not a valid environment variable name") (
      filter (n: !(envName n)) (attrNames extraEnvironment)
    ))
  ];

  failIfProblems =
    v:
    if problems == [ ] then
      v
    else
      throw "hyperhive render: ${toString (length problems)} problem(s):\n- ${concatStringsSep "\n- " problems}";

  mcpDocument = {
    mcpServers = mapAttrs (_: serverJson) mcpServers;
  };
  mcpJson = failIfProblems (toJSON mcpDocument);
  mcpFile = writeText "hyperhive-mcp-servers.json" mcpJson;

  seconds = x: if isInt x then toString x else toJSON x;
  optional = cond: attrs: if cond then attrs else { };

  # claude.model is `--model` after the other arguments, for the agent and for every claude profile.
  claudeArgs =
    c:
    c.args
    ++ (
      if c.model == null then
        [ ]
      else
        [
          "--model"
          c.model
        ]
    );

  # The HIVE_SUBAGENTS file: only what is set (no nulls), the runtime's own record only. A claude
  # profile runs the agent's claude command; store paths in commands keep their context, so the file
  # pulls every profile's agent into the system's closure as the environment does the agent's.
  profileJson =
    p:
    let
      c = profileCfg p;
    in
    {
      inherit (c) runtime worktree delegate;
    }
    // (
      if c.runtime == "acp" then
        {
          acp = {
            inherit (c.acp)
              command
              args
              env
              permissionPolicy
              ;
          }
          // optional (c.acp.authMethod != null) { inherit (c.acp) authMethod; }
          // optional (c.acp.startTimeout != null) { inherit (c.acp) startTimeout; };
        }
      else
        {
          claude = {
            inherit (claudeCfg) command;
            args = claudeArgs c.claude;
          };
        }
    )
    // optional (c.idleTimeout != null) { inherit (c) idleTimeout; }
    // optional (c.budget != null) { inherit (c) budget; };
  subagentsDocument = mapAttrs (_: profileJson) subagents;
  subagentsJson = failIfProblems (toJSON subagentsDocument);
  # No profiles, no file: the harness then offers only `default`, the agent's own runtime.
  subagentsFile = if subagents == { } then null else writeText "hyperhive-subagents.json" subagentsJson;

  raw =
    {
      HIVE_RUNTIME = runtime;
      HIVE_STATE_DIR = stateDirectory;
      HIVE_WORKDIR = workingDirectory;
      HIVE_MCP_SERVERS = "${mcpFile}";
      HIVE_CGROUP = cgroup;
      # The agent's and the tasks' own files (~/.claude, caches, git config) live with the state.
      HOME = stateDirectory;
    }
    // optional (idleTimeout != null) { HIVE_IDLE_TIMEOUT = seconds idleTimeout; }
    // optional (cancelGrace != null) { HIVE_CANCEL_GRACE = seconds cancelGrace; }
    // optional (runtime == "acp") (
      {
        HIVE_ACP_COMMAND = acpCfg.command;
        HIVE_ACP_ARGS = toJSON acpCfg.args;
        HIVE_ACP_ENV = toJSON acpCfg.env;
        HIVE_ACP_PERMISSION_POLICY = if asks then "ask" else acpCfg.permissionPolicy;
      }
      // optional (acpCfg.authMethod != null) { HIVE_ACP_AUTH_METHOD = acpCfg.authMethod; }
      // optional (acpCfg.startTimeout != null) { HIVE_ACP_START_TIMEOUT = seconds acpCfg.startTimeout; }
    )
    // optional (runtime == "claude") {
      HIVE_CLAUDE_COMMAND = claudeCfg.command;
      HIVE_CLAUDE_ARGS = toJSON (claudeArgs claudeCfg);
    }
    // optional (subagentsFile != null) { HIVE_SUBAGENTS = "${subagentsFile}"; }
    # The limits with or without profiles: an agent without any still starts sub-agents of its own runtime.
    // optional (limitsCfg.maxConcurrent != null) {
      HIVE_SUBAGENT_MAX_CONCURRENT = toString limitsCfg.maxConcurrent;
    }
    // optional (limitsCfg.maxDepth != null) { HIVE_SUBAGENT_MAX_DEPTH = toString limitsCfg.maxDepth; }
    // optional (limitsCfg.budget != null) { HIVE_SUBAGENT_BUDGET = toString limitsCfg.budget; }
    // optional (limitsCfg.idleRelease != null) { HIVE_SUBAGENT_IDLE_RELEASE = toString limitsCfg.idleRelease; }
    // optional (limitsCfg.idleAgents != null) { HIVE_SUBAGENT_IDLE_AGENTS = toString limitsCfg.idleAgents; }
    // optional (webCfg.enable == true) (
      { HIVE_WEB_PORT = toString webCfg.port; }
      // optional (webCfg.origin != null) { HIVE_WEB_ORIGIN = webCfg.origin; }
    )
    # claude has no policy of its own to set: only `ask` changes what it does.
    // optional (asks && runtime == "claude") { HIVE_PERMISSION_POLICY = "ask"; }
    // optional (permissionsCfg.timeout != null) { HIVE_PERMISSION_TIMEOUT = seconds permissionsCfg.timeout; }
    # The bounds only with a command: the harness refuses them alone.
    // optional (notifyCfg.command != null) (
      { HIVE_NOTIFY_COMMAND = toJSON notifyCfg.command; }
      // optional (notifyCfg.timeout != null) { HIVE_NOTIFY_TIMEOUT = seconds notifyCfg.timeout; }
      // optional (notifyCfg.concurrency != null) {
        HIVE_NOTIFY_CONCURRENCY = toString notifyCfg.concurrency;
      }
      // optional (notifyCfg.backlog != null) { HIVE_NOTIFY_BACKLOG = toString notifyCfg.backlog; }
    )
    // optional (metricsCfg.enable == true) {
      HIVE_METRICS_PORT = toString metricsCfg.port;
      HIVE_METRICS_ADDRESS = metricsCfg.address;
    }
    // optional (hive != null) {
      HIVE_HIVE = hive.roster;
      HIVE_AGENT_NAME = hive.name;
    }
    // extraEnvironment;
in
{
  inherit problems;
  # The variables exactly as the harness must see them (for tests and documentation).
  unescapedEnvironment = failIfProblems raw;
  # What goes into systemd.services.<name>.environment: `%` escaped for Environment=.
  environment = failIfProblems (mapAttrs (_: escape) raw);
  mcpServers = mcpDocument;
  inherit mcpJson mcpFile;
  # The profiles as written to HIVE_SUBAGENTS' file; subagentsFile is null without profiles.
  subagents = subagentsDocument;
  inherit subagentsJson subagentsFile;
}
