"""Demonstrations from scripted solvers: `actions` writes a solver's grammar-free steps in each action
grammar; `collect` plays the plans in real Chromium and renders the episodes in the agent's own prompts."""
