from tricklab.cli import main

raise SystemExit(main())
