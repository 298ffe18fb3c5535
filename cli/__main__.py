from qprof.main import main

main()
