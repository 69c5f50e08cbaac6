"""The state directory: every file and folder hyperhive keeps in it, named once, made private, checked.

- `layout.py`: the names and modes, each once (`StateDir`, `LAYOUT`), and the names inside the folders;
- `directory.py`: the directory and its folders made private (0700 level by level), refused when others can
  write them, checked at the service's start for a path of the layout that is the wrong kind;
- `files.py`: its files created 0600, written whole through a temporary and renamed, secrets read with care.

Standard library only and cheap to import: `hyperhive send` and the per-turn bash server read paths here.
"""
