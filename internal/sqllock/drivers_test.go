package sqllock_test

import (
	_ "github.com/go-sql-driver/mysql" // sql.Open("mysql", ...) in TestIdleTimeout
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

func postgresOpen(dsn string) gorm.Dialector { return postgres.Open(dsn) }
