"""The read views: a field's JSON path, its alternatives and its default (pure: no BMC needed)."""

from __future__ import annotations

from redfish_tools.views import AttributeRegistry, ComputerSystem, SoftwareInventory, Task


def test_a_missing_key_gives_the_default_and_the_body_stays_whole() -> None:
    body = {"PowerState": "On", "Status": None}
    system = ComputerSystem.from_json(body)
    assert system.power_state == "On"
    assert system.health is None and system.chassis_links is None
    assert system.raw is body


def test_nested_paths_alternatives_and_list_indexes() -> None:
    task = Task.from_json({"PercentComplete": None, "Oem": {"Dell": {"PercentComplete": 40}}, "Messages": ["x"]})
    assert task.percent_complete is None  # present at the top: the Dell value is not used
    assert Task.from_json({"Oem": {"Dell": {"PercentComplete": 40}}}).percent_complete == 40
    assert task.first_message == ""  # Messages[0] is not an object
    assert Task.from_json({"Messages": [{"Message": "done"}]}).first_message == "done"


def test_dell_fields_fall_back_to_the_standard_ones() -> None:
    item = {"Id": "Installed-1", "SoftwareId": "101", "Oem": {"Dell": {"DellSoftwareInventory": {"FQDD": "BIOS"}}}}
    view = SoftwareInventory.from_json(item)
    assert (view.component_id, view.dell_fqdd) == ("101", "BIOS")


def test_the_attribute_registry_is_read_into_views() -> None:
    dependency = {"MapToAttribute": "X", "MapFrom": [{"MapFromAttribute": "BootMode"}]}
    registry = AttributeRegistry.from_json(
        {
            "RegistryEntries": {
                "Attributes": [{"AttributeName": "BootMode", "Value": [{"ValueName": "Uefi"}]}, {"Type": "String"}],
                "Dependencies": [{"Dependency": dependency}],
            }
        }
    )
    assert list(registry.attributes) == ["BootMode"]
    assert registry.attributes["BootMode"].values == ("Uefi",)
    (dep,) = registry.dependencies
    assert (dep.map_to_attribute, dep.map_from[0].attribute, dep.map_from[0].condition) == ("X", "BootMode", "EQU")
