# The hive's agents in, the roster out (docs/hive.md): the JSON file (`HIVE_HIVE`) that every agent's
# service and the operator's CLI read, who is on the host, who may write to whom, where the sockets are.
#
# Pure builtins, as render.nix: Debian's Nix 2.8 and the Python tests (tests/nix) check it offline.
# Every problem is collected into `problems` (messages in option terms below services.hyperhive, e.g.
# "agents.alice.canMessage ..."): hive.nix turns each into an assertion, and a direct caller gets them
# all in one `throw` when it forces `json` or `file`. `warnings` are what is allowed but probably wrong.
{
  # name -> {
  #   user: the static user, or null for the transient one (hyperhive-<name>);
  #   stateDir, workingDirectory: absolute paths;
  #   canMessage, acceptFrom: "all" or a list of names;
  #   webPort: the web view's port, or null when the view is off (0, a free port, is written as null:
  #     nobody knows it before the service starts).
  # }
  agents ? { },
  hopLimit ? 20,
  ratePerMinute ? 30,
  # This host's name in a hive of several hosts (docs/hive-hosts.md), or null: a hive of this host alone.
  host ? null,
  # How this host reaches the broker, or null: { servers, user, passwordFile, tls = null or { ca, cert,
  # key }, each null or a path } (roster.py's `nats`, a missing TLS file left out).
  nats ? null,
  # Where the agents' sockets live: <dir>/<name>/hive.sock (each unit's RuntimeDirectory=).
  dir ? "/run/hyperhive-hive",
  # name -> text -> path of a file holding text (the module passes pkgs.writeText).
  writeText ? builtins.toFile,
}:
let
  inherit (builtins)
    all
    attrNames
    concatLists
    concatStringsSep
    elem
    filter
    isAttrs
    isInt
    isList
    isString
    length
    listToAttrs
    mapAttrs
    match
    stringLength
    toJSON
    ;
  filterAttrs =
    f: set: listToAttrs (map (n: { name = n; value = set.${n}; }) (filter (n: f n set.${n}) (attrNames set)));

  names = attrNames agents;
  # An agent's address: what it is written to by, a path component and a unit's suffix (docs/hive.md).
  nameOk = n: match "[a-z][a-z0-9-]{0,31}" n != null;
  nameRule = "1 to 32 characters, lowercase ASCII letters, digits and '-', starting with a letter (e.g. alice, build-box)";
  # systemd refuses a transient user's name over 31 characters (the unit fails to start, "Invalid
  # argument"; measured with systemd 252): hyperhive- plus 21.
  dynamicUserMax = 31;
  dynamicUser = n: "hyperhive-${n}";
  rosterUser = n: a: if a.user == null then dynamicUser n else a.user;
  absolute = p: isString p && match "/.*" p != null;
  # p inside q (or q itself): whoever writes p writes into q.
  inside = p: q: p == q || match "${q}/.*" p != null;
  # `name@host`: an agent of another host (this host's own, `name@<host>`, is `name`), as roster.py.
  remoteParts = o: match "([^@]*)@(.*)" o;
  localName = o: let p = remoteParts o; in if p != null && host != null && builtins.elemAt p 1 == host then builtins.head p else o;
  remote = o: remoteParts (localName o) != null;
  addressOk = o: let p = remoteParts o; in p != null && nameOk (builtins.head p) && nameOk (builtins.elemAt p 1);
  namesOk = v: v == "all" || (isList v && all isString v);
  shown = l: concatStringsSep ", " l;
  known = if names == [ ] then "none" else shown names;

  listProblems =
    n: key: v:
    if !(namesOk v) then
      [ "agents.${n}.${key} must be \"all\" or a list of agents' names" ]
    else if v == "all" then
      [ ]
    else
      map (
        o:
        if localName o == n then
          "agents.${n}.${key} names ${n} itself; an agent never messages itself: remove \"${o}\""
        else if remote o && !(addressOk o) then
          "agents.${n}.${key} names \"${o}\", which is not an agent's address (name or name@host; each ${nameRule})"
        else if remote o then
          "agents.${n}.${key} names \"${o}\", an agent of another host, but services.hyperhive.hive.host is not set; set it (and hive.nats) to reach other hosts, or remove the name"
        else
          "agents.${n}.${key} names \"${o}\", which is no agent of this host (its agents: ${known}); declare services.hyperhive.agents.${localName o} or remove the name"
      ) (filter (o: localName o == n || (if remote o then !(addressOk o) || host == null else !(elem (localName o) names))) v);

  agentProblems =
    n:
    let
      a = agents.${n};
    in
    (
      if nameOk n then
        [ ]
      else
        [
          "agents.\"${n}\": \"${n}\" is not a valid agent name: ${nameRule}; rename the agent (its name is its address, its unit's suffix and its socket's directory)"
        ]
    )
    ++ (
      if a.user == null && nameOk n && stringLength (dynamicUser n) > dynamicUserMax then
        [
          "agents.${n}: its transient user's name, ${dynamicUser n}, has ${toString (stringLength (dynamicUser n))} characters, over the ${toString dynamicUserMax} systemd allows for DynamicUser= (the unit would never start); shorten the agent's name to at most ${toString (dynamicUserMax - stringLength "hyperhive-")} characters, or set agents.${n}.user"
        ]
      else
        [ ]
    )
    ++ (if absolute a.stateDir then [ ] else [ "agents.${n}: the state directory must be an absolute path" ])
    ++ listProblems n "canMessage" a.canMessage
    ++ listProblems n "acceptFrom" a.acceptFrom
    ++ (
      if a.webPort == null || (isInt a.webPort && a.webPort >= 1 && a.webPort <= 65535) then
        [ ]
      else
        [ "agents.${n}: webPort must be null or a TCP port (1 to 65535)" ]
    );

  # Pairs of agents, each once, in name order.
  pairs = concatLists (
    map (n: map (o: { a = n; b = o; }) (filter (o: o > n) names)) names
  );
  sameUser = p: rosterUser p.a agents.${p.a} == rosterUser p.b agents.${p.b};
  # A transient user and any other agent of the same name: systemd would run the transient one as the
  # static user (DynamicUser= takes an existing user of that name).
  pairProblems =
    p:
    let
      x = agents.${p.a};
      y = agents.${p.b};
    in
    (
      if sameUser p && (x.user == null || y.user == null) then
        [
          "agents ${p.a} and ${p.b} would both run as ${rosterUser p.a x}, one of them as its transient user: give ${
            if x.user == null then p.b else p.a
          } another user (the hive tells agents apart by their users)"
        ]
      else
        [ ]
    )
    ++ (
      if x.stateDir == y.stateDir then
        [ "agents ${p.a} and ${p.b} share one state directory, ${x.stateDir}" ]
      else
        [ ]
    )
    # Different users in one working directory: each writes with UMask=0077, so neither can read or
    # change what the other wrote. (One user sharing a directory is that user's business.)
    ++ (
      if !(sameUser p) && (inside x.workingDirectory y.workingDirectory || inside y.workingDirectory x.workingDirectory) then
        [
          "agents ${p.a} and ${p.b} work in one directory (${x.workingDirectory}, ${y.workingDirectory}) as different users: each writes its files readable by itself only (UMask=0077), so they would break each other's work; give each its own workingDirectory (e.g. a clone or git worktree each)"
        ]
      else
        [ ]
    )
    ++ concatLists (
      map (
        q:
        let
          w = agents.${q.w};
          s = agents.${q.s};
        in
        if inside w.workingDirectory s.stateDir && !(inside w.workingDirectory w.stateDir) then
          [
            "agents.${q.w}.workingDirectory (${w.workingDirectory}) is inside ${q.s}'s state directory (${s.stateDir}), which is private to ${q.s}; choose a directory of ${q.w}'s own"
          ]
        else
          [ ]
      ) [
        {
          w = p.a;
          s = p.b;
        }
        {
          w = p.b;
          s = p.a;
        }
      ]
    );

  # Agents sharing one static user: allowed (they trust each other), but the hive's boundary is gone.
  usersOf = listToAttrs (
    map (n: {
      name = rosterUser n agents.${n};
      value = filter (o: rosterUser o agents.${o} == rosterUser n agents.${n}) names;
    }) names
  );
  warnings = map (
    u:
    "services.hyperhive.agents: ${shown usersOf.${u}} all run as the user ${u}. The hive tells agents apart by their Unix users, so these can read each other's state and send messages as each other; give each its own user unless they trust each other fully."
  ) (filter (u: length usersOf.${u} > 1 && all (n: agents.${n}.user != null) usersOf.${u}) (attrNames usersOf));

  # roster.py's checks of `host` and `nats`, in option terms.
  natsUrlOk = u: isString u && match "(nats|tls)://[^[:space:]]+" u != null;
  tlsOf = if nats == null then null else nats.tls or null;
  hostProblems =
    (
      if host == null || nameOk host then
        [ ]
      else
        [
          "hive.host: \"${toString host}\" is not a valid host name: ${nameRule}; the other hosts address this host's agents as name@host"
        ]
    )
    ++ (
      if nats == null then
        [ ]
      else
        (
          if host == null then
            [
              "hive.nats is set but hive.host is not: set services.hyperhive.hive.host to this host's name in the hive (e.g. \"build\"), which the other hosts address its agents by (alice@build), or remove hive.nats"
            ]
          else
            [ ]
        )
        ++ (
          if isList nats.servers && nats.servers != [ ] then
            [ ]
          else
            [ "hive.nats.servers is empty: name the broker's URL (e.g. \"nats://broker.example.org:4222\")" ]
        )
        ++ map (u: "hive.nats.servers: \"${toString u}\" is not a broker's URL (nats://host:port or tls://host:port)") (
          filter (u: !(natsUrlOk u)) (if isList nats.servers then nats.servers else [ ])
        )
        ++ (if absolute nats.passwordFile then [ ] else [ "hive.nats.passwordFile must be an absolute path" ])
        ++ (
          if tlsOf != null && ((tlsOf.cert or null) == null) != ((tlsOf.key or null) == null) then
            [ "hive.nats.tls: cert and key go together (this host's client certificate and its key); set both or neither" ]
          else
            [ ]
        )
    );

  problems = concatLists [
    (if isAttrs agents then [ ] else [ "agents must be an attribute set of agents" ])
    (if isInt hopLimit && hopLimit >= 1 then [ ] else [ "hive.hopLimit must be a positive whole number" ])
    (
      if isInt ratePerMinute && ratePerMinute >= 1 then
        [ ]
      else
        [ "hive.ratePerMinute must be a positive whole number" ]
    )
    (if match "/run/[^/]+" dir != null then [ ] else [ "the hive's directory must be a directory right below /run" ])
    (concatLists (map agentProblems names))
    (concatLists (map pairProblems pairs))
    hostProblems
  ];

  failIfProblems =
    v:
    if problems == [ ] then
      v
    else
      throw "hyperhive render-hive: ${toString (length problems)} problem(s):\n- ${concatStringsSep "\n- " problems}";

  tlsDocument = filterAttrs (_: v: v != null) {
    ca = tlsOf.ca or null;
    cert = tlsOf.cert or null;
    key = tlsOf.key or null;
  };
  document = {
    version = 1;
    inherit dir hopLimit ratePerMinute;
  }
  // (if host == null then { } else { inherit host; })
  // (
    if nats == null then
      { }
    else
      {
        nats = {
          inherit (nats) servers user passwordFile;
        }
        // (if tlsDocument == { } then { } else { tls = tlsDocument; });
      }
  )
  // {
    agents = mapAttrs (n: a: {
      user = rosterUser n a;
      inherit (a)
        stateDir
        canMessage
        acceptFrom
        webPort
        ;
    }) agents;
  };
  json = failIfProblems (toJSON document);
in
{
  inherit problems warnings document json;
  file = writeText "hyperhive-hive.json" json;
  # The same roster under another name (each agent's own, with its own credentials' paths).
  writeFile = name: writeText name json;
  # Each agent's socket directory below /run (its unit's RuntimeDirectory=), and its socket.
  runtimeDirectory = n: "${builtins.substring 5 (stringLength dir) dir}/${n}";
  socket = n: "${dir}/${n}/hive.sock";
  inherit dynamicUser;
}
