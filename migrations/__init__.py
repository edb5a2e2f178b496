"""Numbered plain-SQL migrations, shipped inside the installed package."""
