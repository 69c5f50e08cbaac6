from hyperhive.cli import main

main()
