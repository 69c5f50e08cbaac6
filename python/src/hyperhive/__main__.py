import sys

if sys.argv[1:] == ["bash-mcp"]:
    # Agents spawn `python -m hyperhive bash-mcp` for every turn: skip click's imports on that path.
    from hyperhive.bash_mcp.main import main
else:
    from hyperhive.cli import main

main()
