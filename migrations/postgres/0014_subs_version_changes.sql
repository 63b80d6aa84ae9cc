-- Bump `subs_version` only when a statement changed rows (issue 30): the statement triggers of
-- 0002 fired for every INSERT, UPDATE and DELETE, so a write that changed nothing (a
-- `DELETE /v1/keys/<a key that does not exist>` that answers 404, an UPDATE matching no row or setting the values
-- a row already has) made push reload its whole subscription index. Each trigger now sees the
-- statement's rows through its transition tables and bumps only when there is one (for an
-- UPDATE: one whose new row differs from every old one). A trigger with transition tables serves
-- one event, hence three per table.
DROP TRIGGER accounts_bump_subs_version ON accounts;
DROP TRIGGER api_keys_bump_subs_version ON api_keys;
DROP TRIGGER subscriptions_bump_subs_version ON subscriptions;
DROP TRIGGER webhook_endpoints_bump_subs_version ON webhook_endpoints;
DROP FUNCTION bump_subs_version();

CREATE FUNCTION bump_subs_version_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        UPDATE subs_version SET seq = seq + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION bump_subs_version_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT * FROM new_rows EXCEPT SELECT * FROM old_rows) THEN
        UPDATE subs_version SET seq = seq + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION bump_subs_version_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM old_rows) THEN
        UPDATE subs_version SET seq = seq + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['accounts', 'api_keys', 'subscriptions', 'webhook_endpoints'] LOOP
        EXECUTE format('CREATE TRIGGER %1$s_bump_subs_version_insert AFTER INSERT ON %1$s '
            'REFERENCING NEW TABLE AS new_rows '
            'FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_inserted()', t);
        EXECUTE format('CREATE TRIGGER %1$s_bump_subs_version_update AFTER UPDATE ON %1$s '
            'REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows '
            'FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_updated()', t);
        EXECUTE format('CREATE TRIGGER %1$s_bump_subs_version_delete AFTER DELETE ON %1$s '
            'REFERENCING OLD TABLE AS old_rows '
            'FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_deleted()', t);
    END LOOP;
END
$$;
