"""Interoperability with BrowserGym and AgentLab: run a jaxwebrl policy in their harness
(`jaxwebrl.interop.agentlab`), and run browsergym-miniwob for side-by-side checks
(`jaxwebrl/interop/browsergym_miniwob_runner.py`, a script for the BrowserGym venv)."""
