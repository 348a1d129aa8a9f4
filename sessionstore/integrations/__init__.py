"""Integrations of sessionstore with other libraries, one module each.

Importing this package imports nothing else: each integration module imports its library
when it is imported itself, and that library comes with the matching extra
(``pip install 'sessionstore[openai-agents]'`` for :mod:`.openai_agents`,
``'sessionstore[langgraph]'`` for :mod:`.langgraph`, ``'sessionstore[adk]'`` for
:mod:`.adk`).
"""
