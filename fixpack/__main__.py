import sys

try:
    from .cli import main

    main()
except KeyboardInterrupt:  # Ctrl-C before a command's own handling (the imports, the parsing)
    from .errors import INTERRUPTED, INTERRUPTED_LINE

    print(INTERRUPTED_LINE, file=sys.stderr)
    sys.exit(INTERRUPTED)
