"""The page's tabs. Each tab (and each lesson) is a module or package exporting
``build(ctx: TabContext) -> dict``: it lays out its components inside the open ``gr.Tab`` and
wires their events, returning the components by name."""

from app.tabs.context import TabContext

__all__ = ["TabContext"]
