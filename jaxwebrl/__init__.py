"""jaxwebrl: a JAX/Flax training stack for web agents (SFT, M-GRPO, REINFORCE) with real browsers."""

__version__ = "0.1.0"
