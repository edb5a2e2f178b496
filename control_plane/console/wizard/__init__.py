"""The operation wizard's forms: the step fields (``steps``) and the parameter rows ⇄
JSON Schema (``schema``). Its routes are ``console.pages.wizard``; design:
docs/architecture.md, "The console"."""
