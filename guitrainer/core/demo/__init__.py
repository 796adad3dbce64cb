"""The built-in Demo: the shapes its model knows and its dataset teaches, and the measure of what a sample shows.

No torch and no Qt: the drawing is PIL, the measure numpy, so the Runs page and the tests can read a sample
without loading a model.
"""
