import pytest

from parallel_tf.graph.aggregation import tree_sum


class Term(str):
    """Spells out the additions done on it, so a test can read the shape of the sum."""

    def __add__(self, other):
        return Term(f"({self}+{other})")


@pytest.mark.parametrize(
    "count, shape",
    [(1, "0"), (2, "(0+1)"), (3, "((0+1)+2)"), (5, "(((0+1)+(2+3))+4)"), (8, "(((0+1)+(2+3))+((4+5)+(6+7)))")],
)
def test_tree_sum_has_a_fixed_pairwise_shape(count, shape):
    assert tree_sum([Term(str(i)) for i in range(count)]) == shape
