from llamaspec.cli import main

main()
