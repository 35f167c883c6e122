"""Code that both sides of the sandbox run (the wire, the arena, build keys, the module loader, structures). It
decides nothing: a sandboxed process may rewrite its own copy, and nothing it then says is believed for that."""
