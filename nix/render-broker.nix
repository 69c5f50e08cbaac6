# The hive's broker across hosts (docs/hive-hosts.md): the nats-server configuration, text for text what
# python/src/hyperhive/hive/nats_setup.py's server_config renders for the same hive (tests/nix/test_broker.py
# compares the two): JetStream with `sync_interval: always`, the account HIVE with the admin user and its
# exports, one account and user a host with its permissions and imports, each password by `include` of
# its file (so the configuration, in the store, holds none).
#
# Pure builtins, as render.nix and render-hive.nix: every problem is collected into `problems` (broker.nix
# turns each into an assertion); a direct caller forcing `text` gets them all in one throw.
{
  # host -> [ agent names ], hosts in name order (an attribute set's order, as the test passes Python).
  hosts ? { },
  port ? 4222,
  address ? "127.0.0.1",
  storeDir ? "/var/lib/nats",
  # host -> the file holding its password fragment (`password: "<password>"`), absolute.
  passwordFiles ? { },
  adminPasswordFile ? null,
  syncAlways ? true,
  # null, or { cert, key, ca ? null }: the server's certificate and key, and the CA it trusts for client
  # certificates (nats_setup's ServerTls: a `tls` block after `listen`).
  tls ? null,
}:
let
  inherit (builtins)
    attrNames
    concatLists
    concatMap
    concatStringsSep
    elem
    filter
    genList
    head
    isAttrs
    isInt
    isList
    isString
    length
    listToAttrs
    match
    stringLength
    toJSON
    ;

  stream = "HIVE";
  kvStream = "KV_hive-dir";
  jsApiPrefix = "$HIVE.API";
  rootClimb = 32;
  nameOk = n: isString n && match "[a-z][a-z0-9-]{0,31}" n != null;
  nameRule = "1 to 32 characters: lowercase ASCII letters, digits and '-', a letter first";
  # printable ASCII without the quote and the backslash (NATS string escapes), as nats_setup's paths.
  pathOk =
    p: isString p && stringLength p <= 4096 && match "[ -~]+" p != null && match ".*[\"\\].*" p == null;

  hostNames = attrNames hosts;
  consumerName = host: agent: "in-${host}-${agent}";
  hostUser = host: "host-${host}";

  # A grant: the subject in the host's account (local), in HIVE (hive), and whether a request on it gets
  # a stream of answers.
  same = s: {
    local = s;
    hive = s;
    stream = false;
  };
  api = rest: streamAnswers: {
    local = "${jsApiPrefix}.${rest}";
    hive = "$JS.API.${rest}";
    stream = streamAnswers;
  };
  ownGrants =
    host: agents:
    concatMap (
      agent:
      let
        name = consumerName host agent;
      in
      map (kind: same "hive.${kind}.*.*.${host}.${agent}") [
        "m"
        "r"
        "s"
      ]
      ++ [
        (api "CONSUMER.MSG.NEXT.${stream}.${name}" true)
        (api "CONSUMER.INFO.${stream}.${name}" false)
        (same "$JS.ACK.${stream}.${name}.>")
        (same "$KV.hive-dir.${host}.${agent}")
      ]
    ) agents;
  sharedGrants = [
    (api "STREAM.INFO.${kvStream}" false)
    (api "STREAM.MSG.GET.${kvStream}" false)
  ];

  # Python's json.dumps(value, separators=(", ", ": ")) with the keys in Python's order: an object is a
  # list of { k, v } pairs here (Nix's attribute sets are sorted).
  obj = pairs: { __pairs = pairs; };
  kv = k: v: { inherit k v; };
  value =
    v:
    if isAttrs v && v ? __pairs then
      "{" + concatStringsSep ", " (map (p: "${toJSON p.k}: ${value p.v}") v.__pairs) + "}"
    else if isList v then
      "[" + concatStringsSep ", " (map value v) + "]"
    else
      toJSON v;

  permissions =
    host: agents:
    obj [
      (kv "publish" (obj [ (kv "allow" (map (g: g.local) (ownGrants host agents ++ sharedGrants))) ]))
      (kv "subscribe" (obj [ (kv "allow" [ "_INBOX_${host}.>" ]) ]))
    ];

  stripSlashes = p: head (match "/*(.*)" p);
  include =
    p:
    let
      text = toString p;
      climbed =
        if match "/.*" text != null then
          concatStringsSep "" (genList (_: "../") rootClimb) + stripSlashes text
        else
          text;
    in
    "include ${toJSON climbed}";

  importOf =
    g:
    obj (
      [
        (kv "service" (obj [
          (kv "account" "HIVE")
          (kv "subject" g.hive)
        ]))
      ]
      ++ (if g.local != g.hive then [ (kv "to" g.local) ] else [ ])
    );

  accounts = map hostUser hostNames;
  exports =
    map (g: obj [
      (kv "service" g.hive)
      (kv "accounts" accounts)
    ]) sharedGrants
    ++ concatMap (
      host:
      map (
        g:
        obj (
          [
            (kv "service" g.hive)
            (kv "accounts" [ (hostUser host) ])
          ]
          ++ (if g.stream then [ (kv "response_type" "stream") ] else [ ])
        )
      ) (ownGrants host hosts.${host})
    ) hostNames;

  hostBlock =
    host:
    let
      agents = hosts.${host};
      user = hostUser host;
      imports = map importOf (ownGrants host agents ++ sharedGrants);
    in
    "  ${toJSON user}: {\n"
    + "    users: [\n"
    + "      {user: ${toJSON user}, ${include passwordFiles.${host}}, permissions: ${value (permissions host agents)}}\n"
    + "    ]\n"
    + "    imports: [\n"
    + concatStringsSep "" (map (e: "      ${value e}\n") imports)
    + "    ]\n  }\n";

  tlsBlock =
    if tls == null then
      ""
    else
      "tls {\n"
      + "  cert_file: ${toJSON (toString tls.cert)}\n"
      + "  key_file: ${toJSON (toString tls.key)}\n"
      + (if (tls.ca or null) != null then "  ca_file: ${toJSON (toString tls.ca)}\n" else "")
      # TLS from the client's first byte (nats_setup.ServerTls says why: no plain INFO to downgrade by).
      + "  handshake_first: true\n"
      + "}\n";

  jetstream = [ "  store_dir: ${toJSON (toString storeDir)}" ] ++ (if syncAlways then [ "  sync_interval: always" ] else [ ]);

  rendered =
    "# The hive's broker (docs/hive-hosts.md), rendered by hyperhive.hive.nats_setup. No password is in\n"
    + "# this file: each user's entry includes its password file.\n"
    + "listen: ${toJSON "${address}:${toString port}"}\n"
    + tlsBlock
    + "jetstream {\n"
    + concatStringsSep "\n" jetstream
    + "\n}\n"
    + "accounts {\n"
    + "  ${toJSON "HIVE"}: {\n"
    + "    jetstream: enabled\n"
    + "    users: [\n      {user: ${toJSON "admin"}, ${include adminPasswordFile}}\n    ]\n"
    + "    exports: [\n"
    + concatStringsSep "" (map (e: "      ${value e}\n") exports)
    + "    ]\n  }\n"
    + concatStringsSep "" (map hostBlock hostNames)
    + "}\n";

  # check_hive's problems, then the server's.
  agentsOk = host: isList hosts.${host} && builtins.all isString hosts.${host};
  hostProblems =
    host:
    let
      agents = hosts.${host};
    in
    (if nameOk host then [ ] else [ "hosts.\"${host}\": \"${host}\" is not a host's name (${nameRule})" ])
    ++ (
      if !(agentsOk host) then
        [ "hosts.${host}: its agents are a list of names" ]
      else
        map (a: "hosts.${host}: \"${a}\" is not an agent's name (${nameRule})") (filter (a: !(nameOk a)) agents)
        ++ (if agents == [ ] then [ "hosts.${host} has no agent; list its agents, or remove the host" ] else [ ])
        ++ (
          if length (attrNames (listToAttrs (map (a: { name = a; value = null; }) agents))) != length agents then
            [ "hosts.${host} names an agent twice" ]
          else
            [ ]
        )
    )
    ++ (
      if passwordFiles ? ${host} then
        (if pathOk (toString passwordFiles.${host}) then [ ] else [ "passwordFiles.${host}: printable ASCII without quotes or backslashes only" ])
      else
        [ "passwordFiles.${host} is missing: every host of hosts needs its password file" ]
    );
  allInboxes = concatMap (h: if agentsOk h then map (a: { inherit a h; name = consumerName h a; }) hosts.${h} else [ ]) hostNames;
  inboxNames = map (i: i.name) allInboxes;
  sharedInboxes = filter (n: length (filter (m: m == n) inboxNames) > 1) inboxNames;
  problems = concatLists [
    (if isAttrs hosts && hostNames != [ ] then [ ] else [ "hosts: the hive has no host; name each host and its agents (hosts.<host> = [ \"alice\" ])" ])
    (concatMap hostProblems hostNames)
    (map (n: "passwordFiles.${n}: ${n} is not one of hosts") (filter (n: !(elem n hostNames)) (attrNames passwordFiles)))
    (
      if sharedInboxes == [ ] then
        [ ]
      else
        [
          "hosts: ${concatStringsSep ", " (map (i: "${i.a}@${i.h}") (filter (i: elem i.name sharedInboxes) allInboxes))} would share an inbox (${head sharedInboxes}): rename one host or agent"
        ]
    )
    (if isInt port && port >= 1 && port <= 65535 then [ ] else [ "port must be a TCP port (1 to 65535)" ])
    (if isString address && stringLength address <= 255 && match "[]0-9A-Za-z.:[-]+" address != null then [ ] else [ "address must be a host address (a name, IPv4 or IPv6)" ])
    (if pathOk (toString storeDir) then [ ] else [ "storeDir: printable ASCII without quotes or backslashes only" ])
    (
      if tls == null then
        [ ]
      else
        concatMap (
          k:
          let
            p = tls.${k} or null;
          in
          if p == null then
            (if k == "ca" then [ ] else [ "tls.${k} must be set with tls (the broker's certificate and its key)" ])
          else if pathOk (toString p) then
            [ ]
          else
            [ "tls.${k}: printable ASCII without quotes or backslashes only" ]
        ) [ "cert" "key" "ca" ]
    )
    (
      if adminPasswordFile != null && pathOk (toString adminPasswordFile) then
        [ ]
      else
        [ "adminPasswordFile must be set (printable ASCII without quotes or backslashes)" ]
    )
  ];
  text =
    if problems == [ ] then
      rendered
    else
      throw "hyperhive render-broker: ${toString (length problems)} problem(s):\n- ${concatStringsSep "\n- " problems}";
in
{
  inherit problems text;
  consumers = inboxNames;
}
