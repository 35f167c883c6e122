"""The candidate's side of the sandbox: the runner (its forward), the recorder (its import) and the builder (its
compiler), with the hardening each applies to itself. Everything these processes send is a claim the trusted side
checks or names as unchecked. Nothing outside this folder imports it."""
