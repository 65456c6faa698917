-- Principals (issue 23 item 2): who made an operator change, as the server authenticated it (the
-- principal's name from `taskling serve --principals`, "token" for TASKLING_API_TOKEN) or as the
-- library or the CLI names it ("library@HOST", `--by`). changed_by stays beside it as a free-text
-- note. NULL on the rows written before, and by binaries older than this migration (they name
-- their columns, so they keep working).
ALTER TABLE taskling.operator_change ADD COLUMN principal text;
