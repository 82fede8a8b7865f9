from data_prep.cli import main

main()
