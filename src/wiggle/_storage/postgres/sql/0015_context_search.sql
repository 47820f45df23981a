-- Context search (docs/dashboard.md#searching, the list filter ctx.FIELD = VALUE): a top-level field
-- of an instance's context as text (a string as itself, a number or boolean as its JSON text;
-- NULL when absent or null). IMMUTABLE, as a context's stored JSON is fixed bytes, so an
-- expression index may use it: the store creates one per field named in the server setting
-- context_search_fields (wiggle/_storage/postgres/context_indexes.py). json, not jsonb: no
-- conversion of the whole document. PostgreSQL's text cannot hold U+0000, and reading any field
-- of a document that escapes one fails, so those escapes are left out first (the regular
-- expression steps over escaped backslashes: "\\u0000" is a backslash and "u0000", kept);
-- wiggle/_storage/base.py context_text leaves them out of a string alike.
CREATE OR REPLACE FUNCTION context_text(ctx bytea, field text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
        SELECT (
            CASE WHEN strpos(doc, '\u0000') = 0 THEN doc
                 ELSE regexp_replace(doc, '(\\\\)|\\u0000', '\1', 'g') END
        )::json ->> field
        FROM (SELECT convert_from(ctx, 'UTF8') AS doc) AS raw
    $$;
