"""Package discovery only; all metadata lives in pyproject.toml.

`prompts/` is a top-level folder of the repository (prompt templates as data). It installs as the package
`kernel_lsp.prompts`, so the code finds it through importlib.resources also when installed non-editable.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

packages = find_packages(include=["kernel_lsp", "kernel_lsp.*", "evaluator", "evaluator.*"])
package_dir = {}
for folder in sorted(p for p in (HERE / "prompts").rglob("*") if p.is_dir() and "__pycache__" not in p.parts):
    rel = folder.relative_to(HERE / "prompts")
    name = "kernel_lsp.prompts." + ".".join(rel.parts)
    packages.append(name)
    package_dir[name] = str(Path("prompts", *rel.parts))
packages.append("kernel_lsp.prompts")
package_dir["kernel_lsp.prompts"] = "prompts"

setup(packages=packages, package_dir=package_dir, include_package_data=True)
