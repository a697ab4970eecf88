"""Renderers: tables to the terminal (rich), JSON and CSV. They format; they never compute."""
