"""What the tests share: tiny run configs (`tiny`), the README's commands (`readme_lines`), the browser
(`browser`), paths, and helpers that a unit test file and its end-to-end twin both use."""
