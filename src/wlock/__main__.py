from wlock.cli import main

main()
