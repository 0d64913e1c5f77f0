"""The check engine: run an exercise's cases in a child process and explain what went wrong."""
