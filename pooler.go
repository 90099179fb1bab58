package shardid

import "errors"

// sqlStater is what a driver's error offers when it carries a SQLSTATE, as
// pgx's *pgconn.PgError does; matching it spares the root package a driver
// import.
type sqlStater interface{ SQLState() string }

// hintPooler returns err with ErrPooledPreparedStatement added when err is
// PostgreSQL's "prepared statement already exists" (42P05) or "does not
// exist" (26000), and err unchanged otherwise.
func hintPooler(err error) error {
	var s sqlStater
	if !errors.As(err, &s) || errors.Is(err, ErrPooledPreparedStatement) {
		return err
	}
	switch s.SQLState() {
	case "42P05", "26000":
		return &pooledStatementError{err}
	}
	return err
}

// pooledStatementError is a driver's error that ErrPooledPreparedStatement
// explains: errors.Is finds both, errors.As the driver's type.
type pooledStatementError struct{ err error }

func (e *pooledStatementError) Error() string {
	return ErrPooledPreparedStatement.Error() + ": " + e.err.Error()
}

func (e *pooledStatementError) Unwrap() []error { return []error{ErrPooledPreparedStatement, e.err} }
