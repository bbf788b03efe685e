from rmqtool.cli import main

main()
