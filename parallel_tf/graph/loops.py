"""The reads of a step that may run inside a loop of steps (training/driver.py): a variable's ordinary read is
a snapshot made once, outside the loop, which would train on stale values without an error, so a step reads each
parameter with a `read_value()` made inside the step, after the previous step's update."""


class StepReads:
    """A custom getter (graph/model.py's model_on) that answers each variable with one `read_value()`, made
    where the step first asks for it: inside a loop's step, that step's read, after the previous step's
    update (a worker's own variables: all-reduce's replicas, async's copies, given as `instead`, {a
    parameter's op name: the copy read in its place}). `of(variables)`: what the step's gradients are
    taken with respect to."""

    def __init__(self, instead=None):
        self._values = {}
        self._instead = instead or {}

    def __call__(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        variable = self._instead.get(variable.op.name, variable)
        if variable.op.name not in self._values:
            self._values[variable.op.name] = variable.read_value()
        return self._values[variable.op.name]

    def of(self, variables):
        return [self._values[variable.op.name] for variable in variables]
