"""The recipes' commands: ``fixpack recipe list | show | check`` (``recipe``), run by whoever writes
a cookbook page or by CI on every recipe, with the check against the vLLM recipe a page names
(``recipe_upstream``) and vLLM's own ``vllm serve`` parser run in a child (``vllm_parser``); and
``apply --recipe`` (``launch``), run by the container's entry point, which checks a recipe's rules
before the install side applies its fix set."""
