"""Greedy evaluation of a policy on held-out tasks and seeds (`evaluate`: success rates, Wilson intervals,
paired differences) and the report built from it (`report`: tables, plots, report.md, the viewer page)."""
