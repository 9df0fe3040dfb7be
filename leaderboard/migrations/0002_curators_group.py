"""The Curators group: edits the template library, never sees models under test or runs."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from leaderboard.roles import CURATORS, ensure_curators_group


def create_curators(apps: Any, schema_editor: Any) -> None:
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations ran; this migration needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    ensure_curators_group(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def remove_curators(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name=CURATORS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("leaderboard", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_curators, remove_curators)]
