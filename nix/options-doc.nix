# docs/options.md, generated from the module's own declarations (needs only nixpkgs' lib):
#   nix-instantiate --eval --strict --json nix/options-doc.nix --arg lib "import $NIXPKGS_LIB" \
#     | python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin))' > docs/options.md
# tests/nix/test_options_doc.py fails when docs/options.md is stale (and prints this command).
{ lib }:
let
  eval = lib.evalModules {
    modules = [
      ../tests/nix/nixos-stand-ins.nix
      ./module.nix
      {
        # Defaults that name packages carry a defaultText, so pkgs is never read here.
        _module.args.pkgs = { };
        _module.check = false;
      }
    ];
  };
  docs = lib.filter (o: o.visible && !o.internal) (
    lib.optionAttrSetToDocList eval.options.services.hyperhive
  );
  text =
    v:
    if v == null then
      null
    else if v ? _type && v._type == "literalExpression" then
      v.text
    else if v ? _type && v._type == "literalMD" then
      v.text
    else
      lib.generators.toPretty { } v;
  # A default told in words (literalMD) is prose, not a Nix expression.
  block =
    label: v:
    if v == null then
      ""
    else if v ? _type && v._type == "literalMD" then
      "*${label}:* ${lib.trim (text v)}\n\n"
    else
      "*${label}:*\n```nix\n${text v}\n```\n\n";
  entry = o: ''
    ## `${o.name}`

    ${lib.replaceStrings [ "{option}" ] [ "" ] o.description}

    *Type:* ${o.type}

    ${block "Default" (o.default or null)}${block "Example" (o.example or null)}'';
in
''
  # `services.hyperhive.agent` options

  Generated from nix/module.nix by nix/options-doc.nix; do not edit (tests/nix/test_options_doc.py
  fails when this file is stale and prints the command that regenerates it).

''
+ lib.concatMapStringsSep "\n" entry docs
