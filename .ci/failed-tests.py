"""The node ids of the tests a pytest JUnit XML report records as failed or in error, one a line."""

import sys
import xml.etree.ElementTree as ET

for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
        module = case.get("classname", "")
        print(module.replace(".", "/") + ".py::" + case.get("name", ""))
