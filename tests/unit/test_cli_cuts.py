"""The CLI's one stream-cut syntax: pairs or the JSON object, one printed form."""

import pytest

from tidemark.cli.cuts import format_cut, parse_cut
from tidemark.errors import ConfigurationError

pytestmark = pytest.mark.unit


def test_pairs_and_json_parse_alike_and_print_as_pairs():
    assert parse_cut("4294967297=10,1=0") == {4294967297: 10, 1: 0}
    assert parse_cut('{"4294967297": 10, "1": 0}') == {4294967297: 10, 1: 0}
    assert format_cut({4294967297: 10, 1: 0}) == "1=0,4294967297=10"
    assert parse_cut(format_cut({3: 7, 0: 1})) == {3: 7, 0: 1}


@pytest.mark.parametrize(
    "text", ["", "0", "0=", "=1", "a=1", "0=-1", "-1=0", "0=1,0=2", "[1]", '{"0": "1"}', "{0: 1}"]
)
def test_a_bad_cut_names_the_flag_and_the_syntax(text):
    with pytest.raises(ConfigurationError, match=r"--cut .*segment=offset pairs"):
        parse_cut(text)
