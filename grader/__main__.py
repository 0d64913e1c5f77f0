from grader.cli import main

raise SystemExit(main())
