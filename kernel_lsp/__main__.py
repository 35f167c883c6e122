from kernel_lsp.cli import main

raise SystemExit(main())
