// RAII for SQLite: running a one-column query, and telling damage from other result codes.
#include "proxy/control/sqlite.hpp"

namespace cordon::proxy::control::sqlite {

int query_column(connection& db, std::string_view sql, std::vector<std::string>& rows) {
    statement st;
    int rc = st.prepare(db.get(), sql, false);
    if (rc != SQLITE_OK) {
        return rc;
    }
    while ((rc = st.step()) == SQLITE_ROW) {
        rows.push_back(st.text(0));
    }
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

bool is_damage(int rc) {
    const int primary = rc & 0xff;
    return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

}  // namespace cordon::proxy::control::sqlite
